"""Run Triton's own tests of its in-process Python API against despina-tritonserver-api.

Usage::

    python tests/triton_python_api/run.py --core-repo PATH --server-repo PATH
        [--results bench/results/triton_python_api.md] [--no-netns]

``--core-repo``: a local copy of github.com/triton-inference-server/core (branch r26.06),
whose ``python/test/test_api.py`` (with its ``test_api_models``) runs unchanged;
``--server-repo``: a local copy of github.com/triton-inference-server/server (tag
v2.71.0), whose ``qa/L0_python_api/test_kserve.py`` (with ``testing_utils.py`` and
``test_model_repository``) runs unchanged, twice: as its ``test.sh`` runs it, and with
``--runxfail``, which runs the cases Triton marks ``xfail(run=False)`` (every server case
of that file); ``test_api.py``'s one such case (``TestServer::test_stop``) runs the same
way. ``test_binding.py`` (tests of NVIDIA's C binding) is not run. Nothing is
fetched and nothing of Triton's is copied into this repository: the files are copied to a
temporary folder and run there with the Python running this script (and its
``PYTHONPATH``, after this folder's), which must have
despina-tritonserver-api, tritonclient[all] and requests installed. Coroutine tests
marked ``asyncio`` run through pytest-asyncio when installed, else through
``asyncio_marker.py`` beside this script.

test_kserve.py binds Triton's ports 8000-8002 on 0.0.0.0; it runs in a private network
namespace (``unshare -n``, as root or with user namespaces) where only its own loopback
is reachable, unless ``--no-netns``. The results (cases run, passed, failed, skipped
with their reasons) are written as Markdown to ``--results``. Exit status: 0 when no case
failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = ROOT / "bench" / "results" / "triton_python_api.md"
PYTEST_TIMEOUT_S = 1800
#: The caller's PYTHONPATH, kept after this folder's (a tree to test in place of the installed one).
PYTHONPATH = os.environ.get("PYTHONPATH", "")


@dataclass(frozen=True)
class Suite:
    """One pytest run: files copied from a Triton repository, the file to run, options."""

    title: str
    repo_option: str
    folder: str
    copies: tuple[str, ...]
    test_file: str
    pytest_args: tuple[str, ...] = ()
    netns: bool = False


SUITES = (
    Suite(
        "core r26.06 python/test/test_api.py",
        "core_repo",
        "python/test",
        ("test_api.py", "test_api_models"),
        "test_api.py",
    ),
    Suite(
        "core r26.06 python/test/test_api.py --runxfail -k test_stop",
        "core_repo",
        "python/test",
        ("test_api.py", "test_api_models"),
        "test_api.py",
        ("--runxfail", "-k", "test_stop"),
    ),
    Suite(
        "server v2.71.0 qa/L0_python_api/test_kserve.py",
        "server_repo",
        "qa/L0_python_api",
        ("test_kserve.py", "testing_utils.py", "test_model_repository"),
        "test_kserve.py",
        netns=True,
    ),
    Suite(
        "server v2.71.0 qa/L0_python_api/test_kserve.py --runxfail",
        "server_repo",
        "qa/L0_python_api",
        ("test_kserve.py", "testing_utils.py", "test_model_repository"),
        "test_kserve.py",
        ("--runxfail",),
        netns=True,
    ),
)


@dataclass(frozen=True)
class Case:
    name: str
    outcome: str  # passed, failed, skipped
    detail: str = ""


def run_suite(suite: Suite, repo: Path, work: Path, use_netns: bool) -> tuple[list[Case], str]:
    """Copy the suite's files into ``work``, run pytest there; (cases, pytest's summary)."""
    source = repo / suite.folder
    for name in suite.copies:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, work / name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, work / name)
    report = work / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        suite.test_file,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "-o",
        "junit_family=xunit1",
        *suite.pytest_args,
    ]
    if importlib.util.find_spec("pytest_asyncio") is None:
        command += ["-p", "asyncio_marker"]
    if suite.netns and use_netns:
        inner = "ip link set lo up && exec " + shlex.join(command)
        command = ["unshare", "-n", "sh", "-c", inner]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), PYTHONPATH]))}
    done = subprocess.run(
        command,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT_S,
        check=False,
    )
    output = (done.stdout + done.stderr).strip().splitlines()
    summary = output[-1] if output else f"pytest exited {done.returncode} without output"
    if not report.is_file():
        return [Case(suite.test_file, "failed", "\n".join(output[-20:]))], summary
    return _cases(report), summary


def _cases(report: Path) -> list[Case]:
    cases = []
    for testcase in ET.parse(report).getroot().iter("testcase"):
        name = f"{testcase.get('classname', '').split('.')[-1]}::{testcase.get('name')}"
        outcome, detail = "passed", ""
        for child in testcase:
            if child.tag in ("failure", "error"):
                outcome, detail = "failed", child.get("message", "")
            elif child.tag == "skipped":
                outcome, detail = "skipped", child.get("message", "")
        cases.append(Case(name, outcome, " ".join(detail.split())[:300]))
    return cases


def write_results(path: Path, runs: list[tuple[Suite, list[Case], str]], netns: bool) -> None:
    lines = [
        "# Triton's in-process Python API tests against despina-tritonserver-api",
        "",
        "Written by `tests/triton_python_api/run.py` (see its docstring): Triton's test files",
        "run unchanged against Despina's `tritonserver` and `tritonfrontend`, CPU only.",
        "`test_binding.py` (NVIDIA's C binding) is not run. test_kserve.py ran "
        + ("in a private network namespace." if netns else "on the host's network."),
        "",
    ]
    for suite, cases, summary in runs:
        counts = {o: sum(c.outcome == o for c in cases) for o in ("passed", "failed", "skipped")}
        lines += [
            f"## {suite.title}",
            "",
            f"{len(cases)} cases: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped (pytest: `{summary}`).",
            "",
            "| case | outcome | detail |",
            "|---|---|---|",
        ]
        lines += [f"| {c.name} | {c.outcome} | {c.detail.replace('|', '/')} |" for c in cases]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--core-repo", type=Path, required=True)
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-netns", action="store_true", help="run test_kserve.py unconfined")
    parser.add_argument("--suite", action="append", help="run only suites whose title has this")
    args = parser.parse_args(argv)
    netns = (
        not args.no_netns and subprocess.run(["unshare", "-n", "true"], check=False).returncode == 0
    )
    runs = []
    for suite in SUITES:
        if args.suite and not any(part in suite.title for part in args.suite):
            continue
        with tempfile.TemporaryDirectory(prefix="triton-python-api-") as tmp:
            cases, summary = run_suite(suite, getattr(args, suite.repo_option), Path(tmp), netns)
        print(f"{suite.title}: {summary}")
        runs.append((suite, cases, summary))
    write_results(args.results, runs, netns)
    return 1 if any(c.outcome == "failed" for _, cases, _ in runs for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
