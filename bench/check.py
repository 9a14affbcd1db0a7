"""CPU per request on the serving path, this tree against a recorded baseline (``make bench-check``).

Serves the peers kit's Python-backend ``add_sub`` in process mode (as Triton runs it) from
two trees at once: this working tree and a baseline commit (default ``a35dc3f``, unpacked
once with ``git archive`` under ``/tmp``), each by this virtualenv's ``python -m despina serve`` with
``PYTHONPATH`` at that tree's sources and default flags. It drives HTTP JSON, HTTP binary
(wrk) and gRPC (h2load) at concurrency 1 and 8 for a fixed time, the two trees in a random
order per round, and reads from ``/proc`` the CPU time (utime + stime) of the server
process and of its model processes, divided by the requests the server counted
(``/v2/models/add_sub/stats``). CPU per request does not depend on how busy the machine
is the way throughput does, so the ratio to the baseline is a guard worth running before
every change to the request path. It informs; it fails nothing. Also reports idle RSS.
``--instructions`` counts user-space instructions per request instead (valgrind's
callgrind, switched on for a fixed number of requests sent one at a time, polling off):
repeatable within about 1.5% under any load.
Needs wrk, h2load and the peers kit (``../shared/tools/peers``)::

    make bench-check                      # or: python bench/check.py --baseline REV --rounds 3
    python bench/check.py --also REV --also REV --concurrency 8 --out /tmp/bisect.md  # bisect
    python bench/check.py --instructions  # callgrind: instructions per request instead

Results (medians over rounds) print and go to ``bench/results/bench_check.md``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = Path(os.environ.get("PEERS_HOME", ROOT.parent / "shared/tools/peers"))
TICK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
PROTOCOLS = ("http-json", "http-binary", "grpc")
READY_S = 300
#: Requests served before instructions are counted, and counted (``--instructions``).
WARM_UP, COUNTED = 20, 200
CONCURRENCY = (1, 8)


@dataclass
class Tree:
    """One tree's running server on ``port`` (HTTP), ``port + 1`` (gRPC), ``port + 2``."""

    name: str
    path: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    samples: dict[tuple[str, int], list[tuple[float, float]]] = field(default_factory=dict)
    idle_rss_kb: tuple[int, int] = (0, 0)


def baseline_tree(revision: str) -> Path:
    """The sources of ``revision``, unpacked once under /tmp (``git archive``; the
    working tree's uncommitted changes are not in it)."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", revision],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = Path(f"/tmp/despina-bench-baseline-{sha}")
    if not (path / "core/src").is_dir():
        path.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(path)], stdin=archive.stdout, check=True)
        archive.wait()
    return path


def payloads() -> Path:
    """The kit's request bodies, written once (``load/make_payloads.py``)."""
    path = Path(os.environ.get("PEERS_SCRATCH", "/tmp/peers")) / "payloads"
    if not (path / "infer_grpc_raw.bin").exists():
        script = PEERS / "load/make_payloads.py"
        subprocess.run([sys.executable, str(script), str(path)], check=True, capture_output=True)
    return path


def shadow_missing_plugins(tree: Tree) -> Path:
    """A folder for the front of ``PYTHONPATH`` that hides, from ``tree``'s server, the
    installed plugins whose code ``tree`` lacks: an empty ``.dist-info`` of the same name
    shadows the installed distribution (the first one on the path wins), so an older
    tree does not load a newer plugin written for hooks it does not know."""
    shim = Path(f"/tmp/despina-bench-shim-{tree.name}")
    shim.mkdir(exist_ok=True)
    sources = [tree.path / "core/src", *(tree.path / "plugins").glob("*/src")]
    for entry in importlib.metadata.entry_points(group="despina"):
        top = entry.value.split(":")[0].split(".")[0]
        if entry.dist is None or any((source / top).is_dir() for source in sources):
            continue
        info = shim / f"{entry.dist.name.replace('-', '_')}-0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {entry.dist.name}\n")
    return shim


def serve(tree: Tree, repository: Path, flags: list[str], wrapper: Sequence[str] = ()) -> None:
    """Start ``despina serve`` of ``repository`` (plus ``flags``) from ``tree``'s sources,
    under ``wrapper`` (valgrind) if given; wait until it is ready."""
    sources = [
        shadow_missing_plugins(tree),
        tree.path / "core/src",
        *sorted((tree.path / "plugins").glob("*/src")),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(s.resolve()) for s in sources)}
    command = [
        *wrapper,
        *(sys.executable, "-m", "despina", "serve"),
        f"--model-repository={repository}",
        *("--http-address=127.0.0.1", f"--http-port={tree.port}"),
        *("--grpc-address=127.0.0.1", f"--grpc-port={tree.port + 1}"),
        *("--metrics-address=127.0.0.1", f"--metrics-port={tree.port + 2}"),
        *flags,
    ]
    log = Path(f"/tmp/bench_check_{tree.name}.log")
    with log.open("w") as handle:
        tree.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=handle)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if tree.process.poll() is not None:
            raise SystemExit(f"{tree.name}: despina serve exited, see {log.name}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{tree.port}/v2/health/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{tree.name}: not ready in {READY_S} s, see {log.name}")


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a server's model processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat_fields(int(entry))[1]) == pid:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kb(pid: int) -> int:
    """Resident set size of ``pid``, KiB."""
    return int(_stat_fields(pid)[21]) * PAGE_KB


def served(tree: Tree) -> int:
    """Successful inferences the server counted so far."""
    url = f"http://127.0.0.1:{tree.port}/v2/models/add_sub/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats = json.load(answer)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def load(tree: Tree, protocol: str, conc: int, seconds: float, bodies: Path) -> None:
    """One closed-loop run of wrk (HTTP) or h2load (gRPC) at ``conc`` connections."""
    if protocol == "grpc":
        command = [
            *("h2load", f"-c{conc}", "-m1", "-t1", f"-D{seconds:g}"),
            *("-d", str(bodies / "infer_grpc_raw.bin")),
            *("-H", "content-type: application/grpc", "-H", "te: trailers"),
            f"http://127.0.0.1:{tree.port + 1}/inference.GRPCInferenceService/ModelInfer",
        ]
    else:
        binary = protocol == "http-binary"
        body = bodies / ("infer_binary.body" if binary else "infer_json.body")
        header = (bodies / "infer_binary.hlen").read_text().strip() if binary else ""
        content_type = "application/octet-stream" if binary else "application/json"
        command = [
            *("wrk", "-t1", f"-c{conc}", f"-d{seconds:g}s", "-s", str(PEERS / "load/post.lua")),
            f"http://127.0.0.1:{tree.port}/v2/models/add_sub/infer",
            *("--", str(body), content_type, header),
        ]
    subprocess.run(command, check=True, capture_output=True, timeout=seconds + 60)


def measure(tree: Tree, protocol: str, conc: int, seconds: float, bodies: Path) -> None:
    """Record (server, model processes) CPU microseconds per request of one run."""
    assert tree.process is not None
    pid = tree.process.pid
    models = children(pid)
    before = (cpu_s(pid), sum(cpu_s(p) for p in models), served(tree))
    load(tree, protocol, conc, seconds, bodies)
    after = (cpu_s(pid), sum(cpu_s(p) for p in models), served(tree))
    count = after[2] - before[2]
    if count <= 0:
        raise SystemExit(f"{tree.name}: no request served over {protocol}")
    sample = ((after[0] - before[0]) * 1e6 / count, (after[1] - before[1]) * 1e6 / count)
    tree.samples.setdefault((protocol, conc), []).append(sample)
    print(
        f"  {tree.name:8} {protocol:11} c={conc}: {count:6} requests, "
        f"server {sample[0]:6.0f} us/req, model {sample[1]:5.0f} us/req",
        flush=True,
    )


def fixed_load(tree: Tree, protocol: str, count: int, bodies: Path) -> None:
    """``count`` requests one after another on one connection (h2load; ``--h1`` for HTTP)."""
    if protocol == "grpc":
        body, headers = bodies / "infer_grpc_raw.bin", ["content-type: application/grpc"]
        url = f"http://127.0.0.1:{tree.port + 1}/inference.GRPCInferenceService/ModelInfer"
        headers.append("te: trailers")
        mode: list[str] = []
    else:
        url, mode = f"http://127.0.0.1:{tree.port}/v2/models/add_sub/infer", ["--h1"]
        body, headers = bodies / "infer_json.body", ["Content-Type: application/json"]
        if protocol == "http-binary":
            length = (bodies / "infer_binary.hlen").read_text().strip()
            body = bodies / "infer_binary.body"
            headers = ["Content-Type: application/octet-stream"]
            headers.append(f"Inference-Header-Content-Length: {length}")
    command = ["h2load", *mode, f"-n{count}", "-c1", "-m1", "-t1", "-d", str(body), url]
    for header in headers:
        command += ["-H", header]
    subprocess.run(command, check=True, capture_output=True, timeout=600)


def count_instructions(tree: Tree, protocol: str, bodies: Path, counted: int) -> None:
    """Record (server, model processes) instructions per request of ``counted`` requests:
    callgrind's instrumentation is switched on for them only, then dumped."""
    assert tree.process is not None
    pids = [str(tree.process.pid), *map(str, children(tree.process.pid))]
    fixed_load(tree, protocol, WARM_UP, bodies)
    subprocess.run(["callgrind_control", "-i", "on", *pids], check=True, capture_output=True)
    fixed_load(tree, protocol, counted, bodies)
    subprocess.run(["callgrind_control", "-i", "off", *pids], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-d", *pids], check=True, capture_output=True)
    totals = []
    for pid in pids:
        dumps = Path("/tmp").glob(f"despina-bench-cg-{tree.name}.{pid}.*")
        latest = max(dumps, key=lambda path: int(path.suffix[1:]))
        line = next(x for x in latest.read_text().splitlines() if x.startswith("totals:"))
        totals.append(int(line.split()[1]) / counted)
    sample = (totals[0], sum(totals[1:]))
    tree.samples.setdefault((protocol, 1), []).append(sample)
    print(f"  {tree.name:8} {protocol:11}: server {sample[0]:9.0f} Ir/req, model {sample[1]:8.0f}")


def no_polling(repository: Path) -> Path:
    """A copy of ``repository``'s add_sub whose model process never polls its channel
    (spinning would count instructions), under /tmp."""
    copy = Path("/tmp/despina-bench-repo-no-polling")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(repository / "add_sub", copy / "add_sub")
    with (copy / "add_sub/config.pbtxt").open("a") as config:
        config.write(
            'parameters: { key: "DESPINA_CHANNEL_POLL_US" value: { string_value: "0" } }\n'
        )
    return copy


def median_pair(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """Medians of the server and the model-process figures."""
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def report(trees: list[Tree], args: argparse.Namespace) -> str:
    """The results page (Markdown): the first tree is the baseline, the last the current one."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs", args.current or "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if args.current is None:
        commit += "` plus the working tree's uncommitted changes"
    else:
        commit += "`"
    base = trees[0]
    if args.instructions:
        title, how = (
            "instructions",
            (
                f"user-space instructions per request (callgrind, thousands) of the server process "
                f"+ its model process over {args.counted} requests sent one at a time after {WARM_UP} "
                f"of warm-up, polling off in both processes"
            ),
        )
    else:
        title, how = (
            "CPU",
            (
                f"{args.rounds} interleaved rounds of {args.seconds:g} s per cell, medians. CPU "
                f"microseconds per request from `/proc` (utime + stime) of the server process + its "
                f"model process, over the requests the server counted"
            ),
        )
    lines = [
        f"# bench-check: {title} per request against a baseline tree",
        "",
        f"`make bench-check` (`bench/check.py`{' --instructions' * args.instructions}): add_sub "
        f"of `{args.repository}` (the peers kit's Python-backend add_sub in process mode unless "
        f"another repository is named), flags `{' '.join(args.server_args) or '(defaults)'}`, "
        f"{how}. Current tree at `{commit}; load average at the start {args.load:.2f}. Lower "
        f"is better; ratio = current / {base.name} of the total.",
        "",
        "| protocol | c | " + " | ".join(f"{t.name} server + model" for t in trees) + " | ratio |",
        "|---|---:|" + "---:|" * (len(trees) + 1),
    ]
    for protocol in args.protocols:
        for conc in args.concurrency:
            pairs = [median_pair(t.samples[(protocol, conc)]) for t in trees]
            scale = 1000 if args.instructions else 1
            cells = " | ".join(f"{p[0] / scale:.0f} + {p[1] / scale:.0f}" for p in pairs)
            ratio = sum(pairs[-1]) / sum(pairs[0])
            lines.append(f"| {protocol} | {conc} | {cells} | {ratio:.2f} |")
    if args.instructions:
        return "\n".join([*lines, ""])
    rss = ", ".join(
        f"{t.name} {t.idle_rss_kb[0] / 1024:.0f} + {t.idle_rss_kb[1] / 1024:.0f}" for t in trees
    )
    lines += [
        "",
        f"Idle RSS (MiB, server + model process, model loaded, before any request): {rss}.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="a35dc3f", help="git revision to compare with")
    parser.add_argument(
        "--also", action="append", default=[], help="another revision measured alongside (bisect)"
    )
    parser.add_argument(
        "--current", help="a revision measured as the current tree (default: the working tree)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one run")
    parser.add_argument("--protocols", type=lambda v: v.split(","), default=PROTOCOLS)
    parser.add_argument(
        "--concurrency", type=lambda v: [int(c) for c in v.split(",")], default=CONCURRENCY
    )
    parser.add_argument("--server-args", type=str.split, default=[], help="flags for every server")
    parser.add_argument(
        "--repository",
        type=Path,
        default=PEERS / "despina/model_repository",
        help="the model repository served (its add_sub is measured)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per request instead (callgrind, --counted requests one "
        "at a time per protocol, polling off; repeatable under any load)",
    )
    parser.add_argument(
        "--counted",
        type=int,
        default=COUNTED,
        help="requests counted per protocol with --instructions (more: less of the "
        "garbage collector's timing in the figure)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.out is None:
        name = "bench_check_instructions.md" if args.instructions else "bench_check.md"
        args.out = HERE / "results" / name
    args.load = os.getloadavg()[0]
    bodies = payloads()
    revisions = [args.baseline, *args.also]
    trees = [Tree(r, baseline_tree(r), 19800 + 10 * n) for n, r in enumerate(revisions)]
    current = ROOT if args.current is None else baseline_tree(args.current)
    trees.append(Tree("current", current, 19800 + 10 * len(revisions)))
    if args.instructions:
        args.rounds, args.concurrency = 1, [1]
        args.server_args = [*args.server_args, "--busy-poll-us=0"]
        args.repository = no_polling(args.repository)
    try:
        for tree in trees:
            wrapper = [
                *("valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no"),
                f"--callgrind-out-file=/tmp/despina-bench-cg-{tree.name}.%p",
            ]
            serve(tree, args.repository, args.server_args, wrapper if args.instructions else ())
        time.sleep(2)
        for tree in trees:
            assert tree.process is not None
            models = children(tree.process.pid)
            tree.idle_rss_kb = (rss_kb(tree.process.pid), sum(rss_kb(p) for p in models))
        for number in range(args.rounds):
            print(f"round {number + 1} of {args.rounds}", flush=True)
            for protocol in args.protocols:
                for conc in args.concurrency:
                    for tree in random.sample(trees, len(trees)):
                        if args.instructions:
                            count_instructions(tree, protocol, bodies, args.counted)
                        else:
                            measure(tree, protocol, conc, args.seconds, bodies)
    finally:
        for tree in trees:
            if tree.process is not None:
                tree.process.terminate()
        for tree in trees:
            if tree.process is not None:
                tree.process.wait(60)
    text = report(trees, args)
    print("\n" + text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
