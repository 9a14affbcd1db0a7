"""Instance count vs intra-op threads (issue 29, item 3): a small ResNet-like CNN with
random weights (built here with torch: torchvision is not needed), exported to ONNX and
TorchScript, served with 1, 2 and 4 CPU instances, each twice: "before" pins the
framework's own default per instance, as Triton runs it (ONNX Runtime:
``intra_op_thread_count: "0"``, which also gives each instance a session of its own;
PyTorch: ``INTRA_OP_THREAD_COUNT`` = the cores; OpenVINO, reading the ONNX file:
``PERFORMANCE_HINT: LATENCY``, its CPU default of one stream) and "after" sets nothing,
so Despina's default applies (ONNX Runtime: the CPU instances share one session with
onnxruntime's pool; PyTorch: ``max(1, cores // instances)`` threads each; OpenVINO: its
own default, the same layout as "before"). One server serves all variants; perf_analyzer
visits them in interleaved rounds (before/after alternate which goes first), so a noisy
host shifts both alike. Prints a markdown table of the median throughput, the
after/before ratio, and each count against one instance.

    .venv/bin/python bench/instance_threads.py --rounds 2 --measurement-ms 3000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF = Path(os.environ.get("PERF_ANALYZER", ROOT.parent / "shared/tools/perf_analyzer"))
SHAPE = (1, 3, 96, 96)


def build_models(folder: Path) -> tuple[bytes, bytes]:
    """(ONNX bytes, TorchScript bytes) of a ResNet-ish CNN with random weights."""
    import io

    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip: nn.Module = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    class ResNetish(nn.Module):  # resnet18's layout: stem, 4 stages of 2 blocks
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )  # fmt: skip
            widths, layers, cin = [32, 64, 128, 256], [], 32
            for i, w in enumerate(widths):
                layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
                cin = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(256, 100)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.layers(self.stem(x))
            return self.fc(torch.flatten(torch.mean(y, dim=(2, 3)), 1))

    torch.manual_seed(0)
    model = ResNetish().eval()
    example = torch.randn(*SHAPE)
    onnx_path = folder / "cnn.onnx"
    torch.onnx.export(
        model, (example,), str(onnx_path), input_names=["INPUT0"], output_names=["OUTPUT0"],
        dynamo=False,
    )  # fmt: skip
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.trace(model, example), buffer)
    return onnx_path.read_bytes(), buffer.getvalue()


def config(backend: str, instances: int, before: bool, cores: int) -> str:
    """The model's config; ``before`` pins the framework's own per-instance default."""
    dims = ", ".join(str(d) for d in SHAPE)
    names = ("INPUT__0", "OUTPUT__0") if backend == "pytorch" else ("INPUT0", "OUTPUT0")
    head = f'backend: "{backend}"\n'
    if backend == "openvino":
        head += 'default_model_filename: "model.onnx"\n'
    io = (
        f'input [ {{ name: "{names[0]}" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        f'output [ {{ name: "{names[1]}" data_type: TYPE_FP32 dims: [ 1, 100 ] }} ]\n'
    )
    param = {
        "onnxruntime": ("intra_op_thread_count", "0"),
        "pytorch": ("INTRA_OP_THREAD_COUNT", str(cores)),
        "openvino": ("PERFORMANCE_HINT", "LATENCY"),  # OpenVINO's CPU default: one stream
    }[backend]
    text = head + "max_batch_size: 0\n" + io
    text += f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
    if before:
        text += f'parameters {{ key: "{param[0]}" value {{ string_value: "{param[1]}" }} }}\n'
    return text


def perf(model: str, port: int, concurrency: int, measurement_ms: int) -> float:
    command = [
        str(PERF), "-m", model, "-u", f"127.0.0.1:{port}", "-i", "http",
        "--concurrency-range", str(concurrency), "-p", str(measurement_ms),
        "--max-trials", "4", "-s", "50",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r"Throughput: ([\d.]+) infer/sec", done.stdout)
    if not found:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        return float("nan")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--backends", default="onnxruntime,pytorch")
    parser.add_argument("--instances", default="1,2,4")
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument("--port", type=int, default=18700)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    backends = args.backends.split(",")
    counts = [int(n) for n in args.instances.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        onnx, script = build_models(Path(tmp))
        for backend in backends:
            for n in counts:
                for variant in ("before", "after"):
                    folder = repo / f"{backend}_i{n}_{variant}" / "1"
                    folder.mkdir(parents=True)
                    name = "model.pt" if backend == "pytorch" else "model.onnx"
                    (folder / name).write_bytes(script if backend == "pytorch" else onnx)
                    (folder.parent / "config.pbtxt").write_text(
                        config(backend, n, variant == "before", cores)
                    )
        server = subprocess.Popen(
            [str(ROOT / ".venv/bin/despina"), "serve", f"--model-repository={repo}",
             f"--http-port={args.port}", f"--grpc-port={args.port + 1}",
             f"--metrics-port={args.port + 2}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(240):
                try:
                    url = f"http://127.0.0.1:{args.port}/v2/health/ready"
                    with urllib.request.urlopen(url, timeout=2):
                        break
                except OSError:
                    time.sleep(0.5)
            results: dict[tuple[str, int, int, str], list[float]] = {}
            for round_index in range(args.rounds):
                for backend in backends:
                    for n in counts:
                        for c in concurrencies:
                            order = ["before", "after"]
                            if round_index % 2:
                                order.reverse()
                            for variant in order:
                                value = perf(
                                    f"{backend}_i{n}_{variant}", args.port, c, args.measurement_ms
                                )
                                results.setdefault((backend, n, c, variant), []).append(value)
                                print(backend, n, c, variant, value, file=sys.stderr, flush=True)
        finally:
            server.terminate()
            server.wait(30)
    print(f"cores: {cores}, rounds: {args.rounds}, -p {args.measurement_ms}\n")
    print(
        "| backend | instances | concurrency | before (infer/s) | after (infer/s) | after / before |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for backend in backends:
        for n in counts:
            for c in concurrencies:
                before = statistics.median(results[(backend, n, c, "before")])
                after = statistics.median(results[(backend, n, c, "after")])
                print(
                    f"| {backend} | {n} | {c} | {before:.1f} | {after:.1f} | {after / before:.2f} |"
                )
    print("\nafter vs count 1 (same backend and concurrency, after the change):\n")
    print("| backend | instances | concurrency | after (infer/s) | vs 1 instance |")
    print("| --- | --- | --- | --- | --- |")
    for backend in backends:
        for n in counts:
            for c in concurrencies:
                one = statistics.median(results[(backend, counts[0], c, "after")])
                after = statistics.median(results[(backend, n, c, "after")])
                print(f"| {backend} | {n} | {c} | {after:.1f} | {after / one:.2f} |")


if __name__ == "__main__":
    main()
