"""Issue 22's GPU figures: a TorchScript resnet18 (random weights) served by Despina, infer/s
at concurrency 1, 8 and 32 for KIND_GPU against KIND_CPU over binary HTTP, and for KIND_GPU
through CUDA shared memory against binary HTTP. One interleaved run: per round, the cases run
in a random order; the table holds medians over rounds::

    python3 bench/gpu_resnet.py --rounds 3 --seconds 10 > bench/results/gpu_resnet.md

Needs torch and tritonclient; the GPU cases need a CUDA device, the CUDA shared-memory case
cupy too (the cases that cannot run are listed as skipped, with why). The server runs as
``python -m despina serve`` on 127.0.0.1 (free ports), with this interpreter, so it works
where Despina is installed with ``pip --target`` (../shared/GPU.md). Each client thread keeps
its own connection (and, for CUDA shared memory, its own device region, left registered
until the server stops).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from run import free_port, wait_ready

CONCURRENCY = (1, 8, 32)
SHAPE = (3, 224, 224)
CLASSES = 1000
CONFIG = """
backend: "pytorch"
max_batch_size: 32
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ count: {count} kind: {kind} }} ]
dynamic_batching {{ }}
"""


def resnet18() -> Any:
    """ResNet-18 (He et al.), random weights, in eval mode: torchvision's when installed,
    else the same architecture written out here (GPU images may lack torchvision)."""
    import torch
    from torch import nn

    try:
        import torchvision

        return torchvision.models.resnet18(weights=None).eval()
    except ImportError:
        pass

    class Block(nn.Module):
        def __init__(self, inp: int, out: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(out)
            self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(out)
            self.down = (
                nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                if stride != 1 or inp != out
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.down(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    width = 64
    for out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(width, out, stride), Block(out, out, 1)]
        width = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, CLASSES)]
    return nn.Sequential(*layers).eval()


def build_repository(root: Path, gpu: bool) -> None:
    """``resnet_cpu`` (KIND_CPU) and, with a GPU, ``resnet_gpu`` (KIND_GPU), one TorchScript."""
    import torch

    scripted = torch.jit.script(resnet18())
    models = {"resnet_cpu": ("KIND_CPU", 1)}
    if gpu:
        models["resnet_gpu"] = ("KIND_GPU", 1)
    for name, (kind, count) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(kind=kind, count=count))
        scripted.save(str(root / name / "1" / "model.pt"))


def http_worker(url: str, model: str) -> Callable[[], None]:
    """One client's request loop body: a binary-HTTP inference of one image."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    image = np.random.default_rng(0).standard_normal((1, *SHAPE), dtype=np.float32)
    tensor = httpclient.InferInput("INPUT__0", [1, *SHAPE], "FP32")
    tensor.set_data_from_numpy(image, binary_data=True)
    output = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)

    def infer() -> None:
        client.infer(model, [tensor], outputs=[output])

    return infer


_regions = itertools.count()


def cuda_shm_worker(url: str, model: str) -> Callable[[], None]:
    """One client's request loop body with the input and output in its own CUDA region: a
    ``cudaMalloc`` of its own (an IPC handle names a whole allocation, never a piece of
    cupy's pool), registered with the server by its IPC handle."""
    import cupy
    import tritonclient.http as httpclient

    runtime = cupy.cuda.runtime
    size_in = int(np.prod(SHAPE)) * 4
    pointer = int(runtime.malloc(size_in + CLASSES * 4))
    image = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    runtime.memcpy(pointer, image.ctypes.data, size_in, runtime.memcpyHostToDevice)
    handle = base64.b64encode(runtime.ipcGetMemHandle(pointer))
    client = httpclient.InferenceServerClient(url)
    name = f"bench_{next(_regions)}"
    client.register_cuda_shared_memory(name, handle, 0, size_in + CLASSES * 4)
    tensor = httpclient.InferInput("INPUT__0", [1, *SHAPE], "FP32")
    tensor.set_shared_memory(name, size_in, 0)
    output = httpclient.InferRequestedOutput("OUTPUT__0")
    output.set_shared_memory(name, CLASSES * 4, size_in)

    def infer() -> None:
        client.infer(model, [tensor], outputs=[output])

    return infer


def measure(make: Callable[[], Callable[[], None]], concurrency: int, seconds: float) -> float:
    """Completed inferences per second over ``seconds`` with ``concurrency`` closed loops,
    each a thread that makes its own client (tritonclient's HTTP client is bound to the
    thread that made it) and calls once to warm up before the clock starts."""
    ready = threading.Barrier(concurrency + 1)
    go = threading.Event()
    deadline = [0.0]
    done = [0] * concurrency
    errors: list[BaseException] = []

    def loop(index: int) -> None:
        try:
            call = make()
            call()
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)
            ready.abort()
            return
        ready.wait()
        go.wait()
        try:
            while time.monotonic() < deadline[0]:
                call()
                done[index] += 1
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait()
    start = time.monotonic()
    deadline[0] = start + seconds
    go.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(done) / (time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    options = parser.parse_args(argv)
    import torch

    gpu = torch.cuda.is_available()
    skipped: list[str] = []
    try:
        import cupy

        cuda_shm = gpu and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception as exc:  # noqa: BLE001 - any cupy failure only skips that case
        cuda_shm = False
        skipped.append(f"CUDA shared memory: cupy unusable ({type(exc).__name__}: {exc})")
    if not gpu:
        skipped.append(f"KIND_GPU and CUDA shared memory: torch {torch.__version__} sees no GPU")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        build_repository(root, gpu)
        http, grpc, metrics = free_port(), free_port(), free_port()
        command = [sys.executable, "-m", "despina", "serve", f"--model-repository={root}"]
        for flag, port in (("http", http), ("grpc", grpc), ("metrics", metrics)):
            command += [f"--{flag}-address=127.0.0.1", f"--{flag}-port={port}"]
        command.append("--allow-client-shm=true")
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sys.stderr)
        try:
            wait_ready(http, server, timeout_s=300)
            url = f"127.0.0.1:{http}"
            cases: dict[str, Callable[[], Callable[[], None]]] = {
                "KIND_CPU, binary HTTP": lambda: http_worker(url, "resnet_cpu"),
            }
            if gpu:
                cases["KIND_GPU, binary HTTP"] = lambda: http_worker(url, "resnet_gpu")
            if cuda_shm:
                cases["KIND_GPU, CUDA shared memory"] = lambda: cuda_shm_worker(url, "resnet_gpu")
            figures: dict[tuple[str, int], list[float]] = {}
            for _ in range(options.rounds):
                order = [(case, c) for case in cases for c in CONCURRENCY]
                random.shuffle(order)
                for case, concurrency in order:
                    rate = measure(cases[case], concurrency, options.seconds)
                    figures.setdefault((case, concurrency), []).append(rate)
        finally:
            server.terminate()
            server.wait(timeout=60)
    device = torch.cuda.get_device_name(0) if gpu else "no GPU"
    print(
        f"resnet18 (TorchScript, random weights), 1 image per request, {device}, torch "
        f"{torch.__version__}; medians of {options.rounds} interleaved rounds of "
        f"{options.seconds:g} s\n"
    )
    print("| case | " + " | ".join(f"c={c} infer/s" for c in CONCURRENCY) + " |")
    print("|---|" + "---:|" * len(CONCURRENCY))
    for case in cases:
        rates = [statistics.median(figures[(case, c)]) for c in CONCURRENCY]
        print(f"| {case} | " + " | ".join(f"{r:.1f}" for r in rates) + " |")
    for line in skipped:
        print(f"\nskipped: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
