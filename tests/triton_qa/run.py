"""Run the CPU-runnable cases of Triton's ``qa/L0_backend_python`` against a server.

Usage (``make triton-qa TRITON_SERVER_REPO=...`` runs the first form)::

    python tests/triton_qa/run.py --triton-repo PATH [--python-backend-repo PATH]
        [--suite NAME ...] [--server-cmd "despina serve"] [--keep]

``PATH`` is a local copy of github.com/triton-inference-server/server (tag v2.51.0, the
Triton Despina is compared with; docs/testing.md describes the runner); nothing is fetched. Each sub-suite is
laid out as its ``test.sh`` lays it out (the same models from ``qa/python_models``, the
same config edits, the same server flags), the server is started on Triton's default
ports 8000/8001/8002 (the test files hard-code them), and the unchanged test files run
under pytest with the real ``tritonclient``. The shell checks a ``test.sh`` makes (a
server that must or must not start, a text that must be in the server log) count as
cases of their own. GPU-only parts are left out: ``TEST_JETSON=1`` for the client (the
test files' own switch for "no CUDA tensors"), and no KIND_GPU / CUDA-pool models.

``--server-cmd`` runs another server the same way, e.g. Triton itself
(``--server-cmd ../shared/tools/tritonserver``), to see the reference counts.
``--shm-size 1g`` and ``--client-python`` (a tritonclient 2.51) recreate Triton's CI
container for the two cases that depend on it (see ``--help``).
Exit status: 0 when every case ran and passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

PORTS = (8000, 8001, 8002)
READY_TIMEOUT_S = 120.0
PORT_WAIT_S = 60.0
PYTEST_TIMEOUT_S = 900


@dataclass
class Case:
    """One counted case: a pytest test or a shell-level check of a ``test.sh``."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Context:
    """The working copy of ``qa/`` one run uses, and how to start the server."""

    work: Path  # plays TRITON_DIR: <work>/qa/L0_backend_python, <work>/qa/python_models
    server_cmd: list[str]
    python_backend: Path | None
    client_python: str = sys.executable  # runs the test files (its tritonclient)
    backends: Path | None = None  # the server's own backends, linked beside add_sub
    cases: dict[str, list[Case]] = field(default_factory=dict)

    @property
    def qa(self) -> Path:
        return self.work / "qa"

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of the server and clients: TRITON_DIR points at the work copy."""
        env = dict(os.environ, TRITON_DIR=str(self.work), TEST_JETSON="1", TEST_WINDOWS="0")
        env.update(extra)
        return env


def model(
    models: Path,
    src: str,
    name: str | None = None,
    *,
    ctx: Context,
    files: Sequence[str] = ("model.py",),
    rename: dict[str, str] | None = None,
    append: Sequence[str] = (),
    subs: Sequence[tuple[str, str]] = (),
    config: bool = True,
) -> Path:
    """Copy ``python_models/<src>`` to ``<models>/<name>`` as ``test.sh`` does.

    ``rename`` maps a source file to its name in the version folder; ``subs`` are
    (regex, replacement) edits of config.pbtxt (multiline), ``append`` lines added to it.
    """
    source = ctx.qa / "python_models" / src
    dest = models / (name or src)
    (dest / "1").mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(source / f, dest / "1" / (rename or {}).get(f, f))
    if config:
        text = (source / "config.pbtxt").read_text()
        for pattern, repl in subs:
            text = re.sub(pattern, repl, text, flags=re.M)
        text += "".join(line + "\n" for line in append)
        (dest / "config.pbtxt").write_text(text)
    return dest


def example(ctx: Context, models: Path, src: str, conf: str, name: str) -> bool:
    """Copy a python_backend example (``examples/decoupled/square_model.py``...)."""
    if ctx.python_backend is None:
        return False
    dest = models / name / "1"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ctx.python_backend / src, dest / "model.py")
    shutil.copy(ctx.python_backend / conf, dest.parent / "config.pbtxt")
    return True


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (/proc), e.g. a supervisor's serving processes."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    return found


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid``, or one it started (``despina serve --serving-processes N``
    serves from its children), holds a listening TCP socket of ``port`` (/proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for holder in (pid, *_children(pid)):
        try:
            fds = os.listdir(f"/proc/{holder}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{holder}/fd/{fd}") in inodes:
                    return True
            except OSError:
                continue
    return False


def _ready(pid: int, until: str = "ready") -> bool:
    """Whether the server ``pid`` listens on port 8000 and answers ``/v2/health/<until>``
    there: another server of this machine may take the port between the check for free
    ports and ours binding it, and its answer is not ours."""
    if not _listens(pid, PORTS[0]):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:8000/v2/health/{until}", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


class Server:
    """A server process started like ``run_server`` in Triton's ``qa/common/util.sh``:
    ``started`` once it answers ``/v2/health/<until>`` (``until=""``: ``run_server_nowait``,
    never ``started``). ``wait_ports=False`` starts it while the ports are taken;
    ``ready_timeout`` is run_server's ``SERVER_TIMEOUT`` (a test.sh may raise it)."""

    def __init__(
        self,
        ctx: Context,
        args: Sequence[str],
        log: Path,
        *,
        env: dict[str, str] | None = None,
        verbose: bool = True,
        until: str = "ready",
        wait_ports: bool = True,
        ready_timeout: float = READY_TIMEOUT_S,
    ):
        deadline = time.monotonic() + PORT_WAIT_S  # e.g. the previous server's sockets
        while wait_ports and (busy := [p for p in PORTS if not _port_free(p)]):
            if time.monotonic() > deadline:
                raise SystemExit(f"ports {busy} are in use; the QA test files need 8000-8002")
            time.sleep(1)
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [*ctx.server_cmd, *args, *(["--log-verbose=1"] if verbose else [])],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ctx.env(**(env or {})),
                start_new_session=True,
            )
        self.started = False
        if not until:
            return
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if _ready(self.proc.pid, until):
                self.started = True
                break
            time.sleep(0.5)
        if not self.started:
            self.stop()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90.0) -> int:
        """Signal the server (``kill_server``) and wait; SIGKILL its group after timeout."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(
    ctx: Context, suite: str, args: Sequence[str], log: Path, verbose: bool = True, **env: str
) -> Iterator[Server]:
    """A started server for the body; a failed start is recorded as a failed case."""
    server = Server(ctx, args, log, env=env, verbose=verbose)
    if not server.started:
        check(ctx, suite, f"server starts ({log.name})", False, log.read_text()[-2000:])
    try:
        yield server
    finally:
        server.stop()


def check(ctx: Context, suite: str, name: str, ok: bool, detail: str = "") -> None:
    """Record one shell-level check of a test.sh."""
    ctx.cases.setdefault(suite, []).append(Case(name, ok, "" if ok else detail))


def pytest(
    ctx: Context,
    suite: str,
    cwd: Path,
    target: str,
    tag: str,
    deselect: Sequence[str] = (),
    **env: str,
) -> None:
    """Run ``python -m pytest target`` in ``cwd`` (without the ``deselect``ed test ids)
    and record its cases from junit xml; a run past PYTEST_TIMEOUT_S is a failed case."""
    report = cwd / f"{tag}.report.xml"
    report.unlink(missing_ok=True)
    command = [ctx.client_python, "-m", "pytest", "-p", "no:cacheprovider"]
    command.append(f"--junitxml={report}")
    command += [f"--deselect={target}::{test}" for test in deselect]
    try:
        proc = subprocess.run(
            [*command, target],
            cwd=cwd,
            env=ctx.env(**env),
            capture_output=True,
            text=True,
            timeout=PYTEST_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        check(ctx, suite, f"{tag}: pytest ran", False, f"timed out after {PYTEST_TIMEOUT_S} s")
        return
    (cwd / f"{tag}.client.log").write_text(proc.stdout + proc.stderr)
    if not report.exists():
        check(ctx, suite, f"{tag}: pytest ran", False, proc.stdout[-2000:])
        return
    for tc in ET.parse(report).getroot().iter("testcase"):
        if tc.find("skipped") is not None:
            continue
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        name = f"{tag}:{tc.get('classname', '').rsplit('.', 1)[-1]}::{tc.get('name')}"
        detail = (bad.get("message") or "") if bad is not None else ""
        check(ctx, suite, name, bad is None, detail[:500])


def script(
    ctx: Context, suite: str, cwd: Path, target: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run a test file as ``python3 file.py`` (unittest main); one case, by exit status."""
    proc = subprocess.run(
        [ctx.client_python, target, *args], cwd=cwd, env=ctx.env(), capture_output=True, text=True
    )
    check(ctx, suite, target, proc.returncode == 0, (proc.stdout + proc.stderr)[-1000:])
    return proc


def shm_entries() -> set[str]:
    """The names in /dev/shm (``get_shm_pages`` of ``L0_backend_python/common.sh``)."""
    return set(os.listdir("/dev/shm"))


def check_shm(ctx: Context, suite: str, before: set[str]) -> None:
    """test.sh's shared-memory check: the server left no /dev/shm entry behind."""
    left = sorted(shm_entries() - before)
    check(ctx, suite, "no /dev/shm entry left after the server stops", not left, str(left))


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# ---- the sub-suites, each as its test.sh lays it out ---------------------------------


def suite_main(ctx: Context) -> None:
    """``L0_backend_python/test.sh`` itself: python_test.py and the start-up checks."""
    s, d = "main", ctx.qa / "L0_backend_python"
    m = fresh(d / "models")
    model(m, "identity_fp32", ctx=ctx)
    model(m, "identity_bf16", ctx=ctx)
    for name, typ, extra in (
        ("identity_uint8", "TYPE_UINT8", "batch8"),
        ("identity_uint8_nobatch", "TYPE_UINT8", "nobatch"),
        ("identity_uint32", "TYPE_UINT32", ""),
        ("identity_bool", "TYPE_BOOL", ""),
    ):
        subs = [(r"^name:.*", f'name: "{name}"'), ("TYPE_FP32", typ)]
        append: list[str] = []
        if extra == "batch8":
            subs.append((r"^max_batch_size:.*", "max_batch_size: 8"))
            append.append(
                "dynamic_batching { preferred_batch_size: [8], "
                "max_queue_delay_microseconds: 12000000 }"
            )
        elif extra == "nobatch":
            subs.append((r"^max_batch_size:.*", ""))
        model(m, "identity_fp32", name, ctx=ctx, subs=subs, append=append)
    model(
        m,
        "identity_fp32",
        "default_model_name",
        ctx=ctx,
        rename={"model.py": "mymodel.py"},
        subs=[(r"^name:.*", 'name: "default_model_name"')],
        append=['default_model_filename: "mymodel.py"'],
    )
    model(m, "pytorch_fp32_fp32", ctx=ctx, subs=[(r"^name:.*", 'name: "pytorch_fp32_fp32"')])
    for src in ("delayed_model", "init_args", "optional", "non_contiguous", "string"):
        model(m, src, ctx=ctx)
    model(m, "string_fixed", ctx=ctx)
    model(m, "dlpack_identity", ctx=ctx)
    args = [f"--model-repository={m}", "--backend-config=python,shm-default-byte-size=5242880"]
    with serving(ctx, s, args, d / "inference_server.log"):
        pytest(ctx, s, d, "python_test.py", "python_test")

    # Non-graceful exit: after the server is SIGKILLed its model processes must exit.
    server = Server(ctx, args, d / "non_graceful.log")
    if server.started:
        children = _children(server.proc.pid)
        server.stop(signal.SIGKILL)
        time.sleep(10)
        alive = [pid for pid in children if _alive(pid)]
        check(ctx, s, "model processes exit after the server is killed", not alive, str(alive))
    else:
        check(ctx, s, "server starts (non_graceful.log)", False, server.log_text()[-2000:])

    m = fresh(d / "models")
    files = sorted(p.name for p in (ctx.qa / "python_models" / "multi_file").glob("*.py"))
    dest = model(m, "multi_file", ctx=ctx, files=files, config=False)
    shutil.copy(ctx.qa / "python_models/identity_fp32/config.pbtxt", dest / "config.pbtxt")
    text = re.sub(
        r"^name:.*", 'name: "multi_file"', (dest / "config.pbtxt").read_text(), flags=re.M
    )
    (dest / "config.pbtxt").write_text(text)
    server = Server(ctx, [f"--model-repository={m}"], d / "multi_file.log")
    check(ctx, s, "multi-file model loads", server.started, server.log_text()[-2000:])
    server.stop()

    m = fresh(d / "models")
    model(m, "model_env", ctx=ctx)
    os.environ["MY_ENV"] = "MY_ENV"
    server = Server(ctx, [f"--model-repository={m}"], d / "model_env.log")
    check(
        ctx, s, "environment variables reach the model", server.started, server.log_text()[-2000:]
    )
    server.stop()

    m = fresh(d / "models")
    model(m, "init_exit", ctx=ctx)
    server = Server(ctx, [f"--model-repository={m}"], d / "init_exit.log")
    check(ctx, s, "init_exit: server does not start", not server.started)
    server.stop()
    needle = "Stub process 'init_exit_0_0' is not healthy."
    check(ctx, s, "init_exit: log has the unhealthy-stub text", needle in server.log_text())


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "--parent", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def suite_argument_validation(ctx: Context) -> None:
    """``argument_validation/test.sh``: its model ships inside the sub-suite folder."""
    d = ctx.qa / "L0_backend_python" / "argument_validation"
    with serving(ctx, d.name, [f"--model-repository={d / 'models'}"], d / "server.log"):
        pytest(ctx, d.name, d, "../test_infer_shm_leak.py", d.name, MODEL_NAME=d.name)


def suite_custom_metrics(ctx: Context) -> None:
    s, d = "custom_metrics", ctx.qa / "L0_backend_python" / "custom_metrics"
    m = fresh(d / "models")
    model(m, s, ctx=ctx)
    with serving(ctx, s, [f"--model-repository={m}"], d / "server.log"):
        pytest(ctx, s, d, "../test_infer_shm_leak.py", s, MODEL_NAME=s)


def suite_request_rescheduling(ctx: Context) -> None:
    s = "request_rescheduling"
    d = ctx.qa / "L0_backend_python" / s
    m = fresh(d / "models")
    for src in (
        "bls_request_rescheduling",
        "request_rescheduling_addsub",
        "iterative_sequence",
        "wrong_return_type",
    ):
        model(m, src, ctx=ctx)
    args = [f"--model-repository={m}", "--model-control-mode=explicit", "--load-model=*"]
    with serving(ctx, s, args, d / "server.log"):
        name = "bls_request_rescheduling"
        pytest(ctx, s, d, "../test_infer_shm_leak.py", name, MODEL_NAME=name)
        pytest(ctx, s, d, "grpc_endpoint_test.py", "grpc_endpoint_test")


def suite_bls(ctx: Context) -> None:
    """``bls/test.sh`` for its CPU models: ``bls`` and ``bls_async`` test CUDA tensors and
    DATADIR models (ONNX, libtorch), and the CUDA memory-pool sizes only vary GPU memory,
    so each trial runs ``bls_memory`` and ``bls_memory_async`` once."""
    s, d = "bls", ctx.qa / "L0_backend_python" / "bls"
    m = fresh(d / "models")
    for src in (
        "bls_memory",
        "bls_memory_async",
        "add_sub",
        "execute_error",
        "identity_fp32",
        "dlpack_identity",
        "dlpack_add_sub",
        "dlpack_square",
        "identity_fp32_timeout",
    ):
        model(m, src, ctx=ctx)
    for trial in ("non_decoupled", "decoupled"):
        log = d / f"bls_{trial}.server.log"
        with serving(ctx, s, [f"--model-repository={m}"], log, BLS_KIND=trial):
            for name in ("bls_memory", "bls_memory_async"):
                tag = f"{name}.{trial}"
                pytest(ctx, s, d, "../test_infer_shm_leak.py", tag, MODEL_NAME=name)

    needle = "BLS is only supported during the 'execute' function."
    for src, must_start in (("bls_init_error", False), ("bls_finalize_error", True)):
        m = fresh(d / "models")
        model(m, src, ctx=ctx)
        server = Server(ctx, [f"--model-repository={m}"], d / f"{src}.server.log")
        check(ctx, s, f"{src}: server starts is {must_start}", server.started == must_start)
        server.stop()
        check(ctx, s, f"{src}: log has {needle!r}", needle in server.log_text())

    p = fresh(d / "params_models")
    model(p, "bls_parameters", ctx=ctx)
    with serving(ctx, s, [f"--model-repository={p}"], d / "bls_parameters.server.log"):
        script(ctx, s, d, "bls_parameters_test.py")


def suite_response_sender(ctx: Context) -> None:
    s, d = "response_sender", ctx.qa / "L0_backend_python" / "response_sender"
    m = fresh(d / "models")
    decoupled = "model_transaction_policy { decoupled: True }"
    batching = "dynamic_batching { max_queue_delay_microseconds: 500000 }"
    for name, src, append in (
        ("response_sender", "model.py", []),
        ("response_sender_decoupled", "model.py", [decoupled]),
        ("response_sender_async", "model_async.py", []),
        ("response_sender_decoupled_async", "model_async.py", [decoupled]),
        ("response_sender_batching", "model.py", [batching]),
        ("response_sender_decoupled_batching", "model.py", [decoupled, batching]),
        ("response_sender_async_batching", "model_async.py", [batching]),
        ("response_sender_decoupled_async_batching", "model_async.py", [decoupled, batching]),
    ):
        model(
            m,
            "response_sender",
            name,
            ctx=ctx,
            files=("model_common.py", src),
            rename={src: "model.py"},
            append=append,
        )
    log = d / "response_sender_test.server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log):
        pytest(ctx, s, d, "response_sender_test.py", "response_sender", SERVER_LOG=str(log))

    m = fresh(d / "models")
    model(m, "response_sender_complete_final", ctx=ctx)
    log = d / "response_sender_complete_final_test.server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log):
        target = "response_sender_complete_final_test.py"
        pytest(ctx, s, d, target, "complete_final", SERVER_LOG=str(log))


def suite_decoupled(ctx: Context) -> None:
    s, d = "decoupled", ctx.qa / "L0_backend_python" / "decoupled"
    m = d / "models"  # ships decoupled_* models; test.sh adds to them
    model(m, "identity_fp32", ctx=ctx)
    model(m, "execute_cancel", ctx=ctx, append=["model_transaction_policy { decoupled: True }"])
    model(m, "dlpack_add_sub", ctx=ctx)
    if not example(
        ctx,
        m,
        "examples/decoupled/square_model.py",
        "examples/decoupled/square_config.pbtxt",
        "square_int32",
    ):
        return
    log = d / "decoupled_server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log):
        # its decoupled_bls model moves tensors to CUDA (a GPU case: on CPU it never answers)
        gpu = ["DecoupledTest::test_decoupled_bls"]
        pytest(ctx, s, d, "decoupled_test.py", "decoupled", deselect=gpu)
    text = log.read_text()
    for needle in ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!"):
        check(ctx, s, f"log has {needle!r}", needle in text)
    for needle in ("Finalize invoked", "Finalize complete..."):
        check(
            ctx,
            s,
            f"log has {needle!r} three times",
            text.count(needle) == 3,
            f"{text.count(needle)} times",
        )


def suite_async_execute(ctx: Context) -> None:
    s, d = "async_execute", ctx.qa / "L0_backend_python" / "async_execute"
    m = fresh(d / "models")
    model(m, "async_execute_decouple", ctx=ctx)
    model(m, "async_execute_decouple_bls", ctx=ctx)
    log = d / "concurrency_test.server.log"
    with serving(ctx, s, [f"--model-repository={m}"], log):
        pytest(ctx, s, d, "concurrency_test.py", "concurrency", SERVER_LOG=str(log))


def suite_lifecycle(ctx: Context) -> None:
    """``lifecycle/test.sh`` (its pytest file once, where test.sh repeats it five times)."""
    s, d = "lifecycle", ctx.qa / "L0_backend_python" / "lifecycle"
    m = fresh(d / "models")
    model(m, "error_code", ctx=ctx)
    model(m, "execute_cancel", ctx=ctx)
    for name, delay in (("execute_error", 12000000), ("execute_grpc_error", 1200000)):
        model(
            m,
            name,
            ctx=ctx,
            subs=[(r"^name:.*", f'name: "{name}"'), (r"^max_batch_size:.*", "max_batch_size: 8")],
            append=[
                "dynamic_batching { preferred_batch_size: [8], "
                f"max_queue_delay_microseconds: {delay} }}"
            ],
        )
    model(m, "execute_return_error", ctx=ctx)
    model(
        m,
        "wrong_model",
        ctx=ctx,
        subs=[(r"^name:.*", 'name: "wrong_model"'), ("TYPE_FP32", "TYPE_UINT32")],
    )
    with serving(ctx, s, [f"--model-repository={m}"], d / "lifecycle_server.log"):
        pytest(ctx, s, d, "lifecycle_test.py", "lifecycle")

    for src, needle, extra, config in (
        ("init_error", "name 'lorem_ipsum' is not defined", [], True),
        ("fini_error", "name 'undefined_variable' is not defined", [], True),
        (
            "auto_complete_error",
            "name 'undefined_variable' is not defined",
            ["--strict-model-config=false"],
            False,
        ),
    ):
        m = fresh(d / "models")
        model(m, src, ctx=ctx, config=config)
        server = Server(ctx, [f"--model-repository={m}", *extra], d / f"{src}.server.log")
        if src == "fini_error":  # the others only grep the log of a failed start
            check(ctx, s, f"{src}: server starts", server.started)
        server.stop()
        check(ctx, s, f"{src}: log has {needle!r}", needle in server.log_text())


def http_status(method: str, url: str, body: str | None = None) -> int:
    """``curl -s -w %{http_code}`` (with ``body``: ``-d``): the status of ``method url``,
    0 when none came."""
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def suite_logging(ctx: Context) -> None:
    """``logging/test.sh``: three servers (default, verbose on, info/warning/error off),
    each checked by how many lines of the log carry each of the model's messages."""
    s, d = "logging", ctx.qa / "L0_backend_python" / "logging"
    m = fresh(d / "models")
    model(m, "identity_fp32_logging", ctx=ctx)
    settings = {
        "default": ([], (4, 0)),
        "verbose": (['{"log_verbose_level":1}'], (4, 3)),
        "disabled": (
            [f'{{"{k}":false}}' for k in ("log_info", "log_warning", "log_error")],
            (1, 0),
        ),
    }
    for trial, (bodies, (plain, verbose)) in settings.items():
        log = d / f"logging_server.{trial}.log"
        server = Server(ctx, [f"--model-repository={m}"], log, verbose=False)
        if not server.started:  # test.sh exits here
            check(ctx, s, f"server starts ({log.name})", False, server.log_text()[-2000:])
            return
        for body in bodies:
            code = http_status("POST", "http://127.0.0.1:8000/v2/logging", body)
            check(ctx, s, f"{trial}: POST /v2/logging {body} is 200", code == 200, str(code))
        pytest(ctx, s, d, "logging_test.py", f"log_test.{trial}")
        server.stop()
        lines = server.log_text().splitlines()
        for kind, want in (
            ("Specific", plain),
            ("Info", plain),
            ("Warning", plain),
            ("Error", plain),
            ("Verbose", verbose),
        ):
            got = sum(f"{kind} Msg!" in line for line in lines)
            check(ctx, s, f"{trial}: {want} log lines with '{kind} Msg!'", got == want, f"{got}")


def suite_model_control(ctx: Context) -> None:
    """``model_control/test.sh``: a Python model and an ensemble over it, loaded and
    unloaded five times in explicit mode."""
    s, d = "model_control", ctx.qa / "L0_backend_python" / "model_control"
    m = fresh(d / "models")
    model(m, "identity_fp32", ctx=ctx)
    model(m, "simple_identity_fp32", ctx=ctx, files=())
    args = [f"--model-repository={m}", "--model-control-mode=explicit"]
    with serving(ctx, s, args, d / "model_control_server.log"):
        pytest(ctx, s, d, "model_control_test.py", "model_control")


def suite_ensemble(ctx: Context) -> None:
    """``ensemble/test.sh`` without ``ensemble_gpu`` (a KIND_GPU libtorch model from
    DATADIR): ``test_ensemble_gpu`` is left out."""
    s, d = "ensemble", ctx.qa / "L0_backend_python" / "ensemble"
    m = fresh(d / "models")
    model(m, "ensemble", ctx=ctx, files=())
    for name in ("add_sub_1", "add_sub_2"):
        model(m, "add_sub", name, ctx=ctx)
    before = shm_entries()
    with serving(ctx, s, [f"--model-repository={m}"], d / "ensemble_server.log"):
        gpu = ["EnsembleTest::test_ensemble_gpu"]
        pytest(ctx, s, d, "ensemble_test.py", "ensemble", deselect=gpu)
    check_shm(ctx, s, before)


def suite_io(ctx: Context) -> None:
    """``io/test.sh``'s one CPU case, ``test_requested_output_default``, with the server
    it runs under. Left out as GPU-only: ``test_ensemble_io`` (both trials; every
    combination asks for CUDA outputs), ``test_empty_gpu_output`` and
    ``test_variable_gpu_output`` (``torch.device("cuda")``) and
    ``test_requested_output_decoupled`` (its GPU_OUTPUT flags are all true: ``.cuda()``)."""
    s, d = "io", ctx.qa / "L0_backend_python" / "io"
    m = fresh(d / "models")
    model(m, "add_sub", ctx=ctx)
    model(m, "dlpack_io_identity_decoupled", ctx=ctx)
    with serving(ctx, s, [f"--model-repository={m}"], d / "io_server.log"):
        target = "io_test.py::IOTest::test_requested_output_default"
        pytest(ctx, s, d, target, "test_requested_output_default")


def suite_python_based_backends(ctx: Context) -> None:
    """``python_based_backends/test.sh``: a backend written in Python (``add_sub`` in the
    backend directory), a Python model and a TorchScript model (made by Triton's
    ``gen_qa_pytorch_model.py`` with the client's torch), all loaded by the test."""
    s, d = "python_based_backends", ctx.qa / "L0_backend_python" / "python_based_backends"
    backends = fresh(ctx.work / "backends")
    for entry in ctx.backends.iterdir() if ctx.backends else ():
        (backends / entry.name).symlink_to(entry.resolve())
    (backends / "add_sub").mkdir()
    shutil.copy(
        ctx.qa / "python_models/python_based_backends/add_sub_backend/model.py",
        backends / "add_sub/model.py",
    )
    m = fresh(d / "models")
    for name, operation in (("add", "add"), ("sub", "sub")):
        (m / name / "1").mkdir(parents=True)
        (m / name / "1/model.json").write_text(f'{{ "operation": "{operation}" }}\n')
        (m / name / "config.pbtxt").write_text('backend: "add_sub"\n')
    shutil.copytree(m / "add/1", m / "add/2")
    model(m, "add_sub", ctx=ctx)
    shutil.copytree(m / "add_sub/1", m / "add_sub/2")
    gen = ctx.qa / "common/gen_qa_pytorch_model.py"
    proc = subprocess.run(
        [ctx.client_python, str(gen), "-m", str(m)], capture_output=True, text=True
    )
    if proc.returncode != 0:  # test.sh exits here
        check(ctx, s, "gen_qa_pytorch_model.py runs", False, proc.stderr[-1000:])
        return
    args = [
        f"--model-repository={m}",
        f"--backend-directory={backends}",
        "--model-control-mode=explicit",
    ]
    with serving(ctx, s, args, d / "python_based_backends_server.log"):
        pytest(ctx, s, d, "python_based_backends_test.py", "python_based_backends")


# (example folder, model file, config file, model name, client) in test.sh's order; the
# models pile up in one repository, so each server serves all the examples before it.
EXAMPLES = (
    ("add_sub", "model.py", "config.pbtxt", "add_sub", "client.py"),
    ("pytorch", "model.py", "config.pbtxt", "pytorch", "client.py"),
    ("bls", "sync_model.py", "sync_config.pbtxt", "bls_sync", "sync_client.py"),
    ("decoupled", "repeat_model.py", "repeat_config.pbtxt", "repeat_int32", "repeat_client.py"),
    ("decoupled", "square_model.py", "square_config.pbtxt", "square_int32", "square_client.py"),
    ("bls", "async_model.py", "async_config.pbtxt", "bls_async", "async_client.py"),
    ("auto_complete", "", "", "", "client.py"),
    (
        "bls_decoupled",
        "sync_model.py",
        "sync_config.pbtxt",
        "bls_decoupled_sync",
        "sync_client.py",
    ),
    (
        "bls_decoupled",
        "async_model.py",
        "async_config.pbtxt",
        "bls_decoupled_async",
        "async_client.py",
    ),
    ("custom_metrics", "model.py", "config.pbtxt", "custom_metrics", "client.py"),
)


def suite_examples(ctx: Context) -> None:
    """``examples/test.sh`` on the python_backend repository's examples: each example's
    client must exit 0 and print PASS. Left out: ``jax`` (test.sh's Jetson switch; its
    model needs jax in the server's Python) and ``instance_kind`` (ResNet50 from
    torch.hub and an image from the web: needs the internet). The BLS async examples,
    which test.sh skips only on Jetson, run."""
    s, d = "examples", ctx.qa / "L0_backend_python" / "examples"
    if ctx.python_backend is None:
        return
    repo = fresh(d / "python_backend")
    shutil.copytree(ctx.python_backend / "examples", repo / "examples")
    m, args = repo / "models", [f"--model-repository={repo / 'models'}"]
    for folder, model_file, config, name, client in EXAMPLES:
        src = repo / "examples" / folder
        if name:
            example(ctx, m, f"examples/{folder}/{model_file}", f"examples/{folder}/{config}", name)
        else:  # auto_complete: two config-less models, and the flag stays on from here
            for batching in ("nobatch", "batch"):
                (m / f"{batching}_auto_complete/1").mkdir(parents=True)
                shutil.copy(
                    src / f"{batching}_model.py", m / f"{batching}_auto_complete/1/model.py"
                )
            args.append("--strict-model-config=false")
        log = d / f"examples_server.{name or folder}.log"
        with serving(ctx, s, args, log):
            proc = script(ctx, s, repo, f"examples/{folder}/{client}")
            check(ctx, s, f"examples/{folder}/{client} prints PASS", "PASS" in proc.stdout)


SUITES: dict[str, Callable[[Context], None]] = {
    "main": suite_main,
    "argument_validation": suite_argument_validation,
    "custom_metrics": suite_custom_metrics,
    "request_rescheduling": suite_request_rescheduling,
    "bls": suite_bls,
    "response_sender": suite_response_sender,
    "decoupled": suite_decoupled,
    "async_execute": suite_async_execute,
    "lifecycle": suite_lifecycle,
    "logging": suite_logging,
    "model_control": suite_model_control,
    "examples": suite_examples,
    "ensemble": suite_ensemble,
    "io": suite_io,
    "python_based_backends": suite_python_based_backends,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--triton-repo", type=Path, default=os.environ.get("TRITON_SERVER_REPO"))
    parser.add_argument(
        "--python-backend-repo", type=Path, default=os.environ.get("PYTHON_BACKEND_REPO")
    )
    sys.modules.setdefault("run", sys.modules[__name__])  # core_suites imports its helpers
    from core_suites import FOLDERS, SUITES as CORE_SUITES

    suites = {**SUITES, **CORE_SUITES}
    parser.add_argument("--suite", action="append", choices=sorted(suites))
    parser.add_argument(
        "--server-cmd",
        # Triton 2.51 bounds no HTTP body; Despina's 64 MB default is newer Triton's
        default=f"{shlex.quote(sys.executable)} -m despina serve --http-max-input-size={2 << 30}",
        help="command that starts the server (given --model-repository and more)",
    )
    parser.add_argument(
        "--client-python",
        default=sys.executable,
        help="Python that runs the test files, e.g. a virtualenv with Triton's own release "
        "of tritonclient (test_bf16 sends BF16 as float32, which tritonclient refuses since r26.06)",
    )
    parser.add_argument(
        "--shm-size",
        help="run everything with a /dev/shm of this size (e.g. 1g, as Triton's CI "
        "container: test_growth_error counts on running out of it); needs root: the runner "
        "runs itself again in a mount namespace of its own (unshare -m)",
    )
    parser.add_argument(
        "--backend-directory",
        type=Path,
        help="the server's own backends (Triton: ~/.cache/tritonserver/backends); "
        "python_based_backends links them beside its add_sub backend",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    opts = parser.parse_args(argv)
    if opts.shm_size and os.environ.get("TRITON_QA_SHM") != opts.shm_size:
        return _in_private_shm(opts.shm_size, argv)
    if opts.triton_repo is None or not (opts.triton_repo / "qa/L0_backend_python").is_dir():
        parser.error("give --triton-repo (or TRITON_SERVER_REPO): a copy of Triton's server repo")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers on the way out
    lock = _one_run_at_a_time()  # noqa: F841 (held until the process exits)
    work = Path(tempfile.mkdtemp(prefix="triton-qa-")).resolve()
    for part in ("L0_backend_python", "python_models", "common", *FOLDERS):
        shutil.copytree(opts.triton_repo / "qa" / part, work / "qa" / part)
    if (opts.triton_repo / "src/test/models").is_dir():  # models Dockerfile.QA copies
        shutil.copytree(opts.triton_repo / "src/test/models", work / "src/test/models")
    ctx = Context(
        work,
        shlex.split(opts.server_cmd),
        opts.python_backend_repo,
        opts.client_python,
        backends=opts.backend_directory,
    )
    total = failed = 0
    try:
        for name in opts.suite or suites:
            suites[name](ctx)
            cases = ctx.cases.get(name, [])
            bad = [c for c in cases if not c.passed]
            total, failed = total + len(cases), failed + len(bad)
            print(f"{name}: {len(cases) - len(bad)}/{len(cases)} passed", flush=True)
            for c in bad:
                print(f"  FAILED {c.name}: {c.detail.strip()[:300]}", flush=True)
            if name in ("decoupled", "examples") and opts.python_backend_repo is None:
                print("  (skipped in part or whole: needs --python-backend-repo)")
    finally:
        if opts.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"total: {total - failed}/{total} passed")
    return 0 if total and not failed else 1


def _one_run_at_a_time() -> TextIO:
    """An exclusive lock that runs of this runner on one machine take in turn: they all
    serve on ports 8000-8002, and a server of another run that binds them between our
    check and our bind answers our test files. The lock is released when the file closes."""
    lock = open(Path(tempfile.gettempdir()) / "despina-triton-qa.lock", "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("waiting for another triton-qa run to finish", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _in_private_shm(size: str, argv: Sequence[str] | None) -> int:
    """This runner again, with a tmpfs of ``size`` on /dev/shm seen by it alone."""
    mount = f"mount -t tmpfs -o size={shlex.quote(size)} tmpfs /dev/shm"
    command = [sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv)]
    script = f"{mount} && exec {shlex.join(command)}"
    env = dict(os.environ, TRITON_QA_SHM=size)
    return subprocess.run(["unshare", "-m", "sh", "-c", script], env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
