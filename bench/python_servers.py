"""What the Python-backend benchmarks share: a one-model repository in each execution
mode, the servers to run on it (Despina in process mode and in-process, Triton 2.51),
one server at a time on 127.0.0.1, and the markdown report."""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from run import free_port, wait_ready

HERE = Path(__file__).resolve().parent
TRITON = HERE.parent.parent / "shared/tools/tritonserver"
IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value: { string_value: "in-process" } }'
T = TypeVar("T")


def arguments(doc: str, report: str) -> argparse.ArgumentParser:
    """The command line of a benchmark documented by ``doc``: its own options go after
    ``--triton`` and ``--output`` (default ``bench/results/<report>``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--triton", action="store_true", help="also measure tritonserver")
    parser.add_argument("--output", type=Path, default=HERE / "results" / report)
    return parser


def write_model(root: Path, name: str, config: str, model_py: str) -> Path:
    """A repository at ``root`` holding model ``name`` (version 1)."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1/model.py").write_text(model_py)
    return root


def each_server(
    tmp: Path,
    repository: Callable[[Path, str], Path],
    triton: bool,
    measure: Callable[[subprocess.Popen[bytes], int], T],
) -> list[tuple[str, T]]:
    """``measure(process, http_port)`` on each server once its model is ready:
    Despina in process mode and in-process (``repository(root, parameters)`` writes the
    repository with the config's extra ``parameters``), Triton too when ``triton``."""
    despina = [str(Path(sys.executable).parent / "despina"), "serve", "--http-address=127.0.0.1"]
    process_mode = repository(tmp / "process", "")
    runs = [
        ("despina process mode", [*despina, f"--model-repository={process_mode}"]),
        (
            "despina in-process",
            [*despina, f"--model-repository={repository(tmp / 'in_process', IN_PROCESS)}"],
        ),
    ]
    if triton:
        runs.append(("triton 2.51", [str(TRITON), f"--model-repository={process_mode}"]))
    results = []
    for name, command in runs:
        http, grpc, metrics = free_port(), free_port(), free_port()
        flags = [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
        process = subprocess.Popen(
            [*command, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_ready(http, process, timeout_s=180)
            results.append((name, measure(process, http)))
        finally:
            process.terminate()
            process.wait(60)
        print(f"{name}: measured", flush=True)
    return results


def write_report(
    output: Path, title: str, how: str, columns: list[str], rows: Iterable[list[str]]
) -> None:
    """A markdown report: title, when, where and how, then one table."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# {title}",
        "",
        f"{stamp}, {platform.node()} ({platform.machine()}), {how}",
        "",
        "| " + " | ".join(columns) + " |",
        "| --- |" + " ---: |" * (len(columns) - 1),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]
    output.write_text("\n".join(lines))
    print(f"written to {output}")
