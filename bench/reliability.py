"""Reliability under failure: a killed model process, SIGTERM with requests in flight,
and reloads under load, measured on real ``despina serve`` processes with tritonclient.

Each scenario serves a Python ``add_sub`` model in process mode (the default: one child
process per instance) on 127.0.0.1 free ports and drives it with client threads, each
with its own tritonclient (alternately HTTP and gRPC), one request at a time, every
request with fresh inputs whose answer is checked. Every request ends as one of:

- ``ok``: the right outputs; ``wrong``: an answer with other outputs;
- ``error``: an error answer from the server (HTTP status or gRPC code, with its text);
- ``refused``: the connection was refused, so nothing was sent (the server is gone);
- ``lost``: sent, then the connection broke without an answer (reset, closed);
- ``hang``: no answer within ``--request-timeout``.

1. **kill**: under steady load, SIGKILL the model's child process (found under the
   server's PID in ``/proc``) ``--kills`` times; per kill, the time until a request sent
   after the kill is answered, what ``/v2/models/add_sub/ready`` and ``/v2/health/ready``
   (polled every ``--ready-poll-ms``) said meanwhile, and the requests that failed.
2. **sigterm**: ``--concurrency`` clients (half on a model that sleeps ``--slow-s`` per
   request) when the server gets SIGTERM, without and with ``--shutdown-grace-period``;
   every request sent must be answered (right outputs or an error), the exit status 0.
3. **reload**: ``--reload-requests`` requests in all (half per mode) while the model is
   reloaded over and over: explicit mode (``load`` of the same model, back to back) and
   poll mode (a version folder added and removed, the config changed, in turn).

Each lost, hung or wrong request is listed under "Incidents" with its time after the
scenario's last event (kill, SIGTERM, reload) before it was sent; ``--logs DIR`` keeps
the servers' logs. Prints the tables and writes them to ``bench/results/reliability.md``::

    .venv/bin/python bench/reliability.py [--kills 10] [--concurrency 16] \\
        [--reload-requests 100000] [--only kill,sigterm,reload]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import http.client
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from python_servers import write_model
from run import free_port, wait_ready
from tritonclient.utils import InferenceServerException

HERE = Path(__file__).resolve().parent
MODEL = "add_sub"
SLOW = "sleepy"
STUB = b"despina_backend_python.model_process.stub"
#: Bounds of the loops that otherwise run until the clients finish: readiness polls,
#: reloads.
MAX_STEPS = 10**6

MODEL_PY = """\
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.delay = float(parameters.get("delay_s", {}).get("string_value", "0"))

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if self.delay:
                time.sleep(self.delay)
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def model_config(name: str, delay_s: float = 0.0, count: int = 1, revision: int = 0) -> str:
    """add_sub's config (FP32 [4] in and out) with ``count`` instances; the model sleeps
    ``delay_s`` per request; ``revision`` only makes a new config text."""
    tensors = "\n".join(
        f'{kind} {{ name: "{kind.upper()}{i}" data_type: TYPE_FP32 dims: [ 4 ] }}'
        for kind in ("input", "output")
        for i in (0, 1)
    )
    parameters = {"delay_s": f"{delay_s:g}", "revision": str(revision)}
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{tensors}\n'
        f"instance_group {{ count: {count} kind: KIND_CPU }}\n"
        + "".join(
            f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
            for k, v in parameters.items()
        )
    )


def repository(root: Path, slow_s: float = 0.0, slow_count: int = 2) -> Path:
    """``add_sub`` (one instance) and, when ``slow_s``, ``sleepy`` (``slow_count``
    instances sleeping ``slow_s`` per request) under ``root``."""
    write_model(root, MODEL, model_config(MODEL), MODEL_PY)
    if slow_s:
        write_model(root, SLOW, model_config(SLOW, slow_s, slow_count), MODEL_PY)
    return root


class Server:
    """``despina serve`` on 127.0.0.1 free ports, its log in ``log``."""

    def __init__(self, root: Path, flags: list[str], log: Path) -> None:
        self.http, self.grpc = free_port(), free_port()
        command = [
            str(Path(sys.executable).parent / "despina"),
            "serve",
            f"--model-repository={root}",
            *("--http-address=127.0.0.1", f"--http-port={self.http}"),
            *("--grpc-address=127.0.0.1", f"--grpc-port={self.grpc}"),
            "--allow-metrics=false",
            *flags,
        ]
        with log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_ready(self.http, self.process, timeout_s=180)
        except BaseException:
            self.stop(10)
            raise

    def stubs(self) -> list[int]:
        """PIDs of the server's Python model child processes."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(stat[1]) == self.process.pid and STUB in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
        return found

    def stop(self, timeout_s: float = 60) -> int | None:
        """SIGTERM, then the exit status (None: still running after ``timeout_s``, killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            return None


@dataclass(slots=True)
class Outcome:
    """One request: when it was sent and ended (``time.monotonic``), how, and a detail
    (the answering version for ``ok``, else the error's status and text)."""

    sent: float
    done: float
    protocol: str
    model: str
    kind: str
    detail: str


_REFUSED = ("Connection refused", "failed to connect to all addresses")
_LOST = ("Socket closed", "Connection reset", "Broken pipe", "Stream removed", "GOAWAY")


class Client:
    """One tritonclient (``protocol``: http or grpc); :meth:`infer` sends one request with
    fresh inputs and classifies how it ended; it never raises."""

    def __init__(self, protocol: str, server: Server, timeout_s: float, seed: int) -> None:
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.random = np.random.default_rng(seed)
        self.client: Any
        if protocol == "http":
            self.client = httpclient.InferenceServerClient(
                f"127.0.0.1:{server.http}", connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")

    def infer(self, model: str) -> Outcome:
        a, b = self.random.random((2, 4), dtype=np.float32)
        module: Any = httpclient if self.protocol == "http" else grpcclient
        inputs = [module.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        sent = time.monotonic()
        try:
            if self.protocol == "http":
                result = self.client.infer(model, inputs)
                version = result.get_response()["model_version"]
            else:
                result = self.client.infer(model, inputs, client_timeout=self.timeout_s)
                version = result.get_response().model_version
            right = np.array_equal(result.as_numpy("OUTPUT0"), a + b) and np.array_equal(
                result.as_numpy("OUTPUT1"), a - b
            )
            kind, detail = ("ok", version) if right else ("wrong", f"version {version}")
        except InferenceServerException as exc:
            kind, detail = self._classify(str(exc.status()), exc.message() or "")
        except Exception as exc:  # noqa: BLE001 - every way a request ends is counted
            kind, detail = self._classify(type(exc).__name__, str(exc))
        return Outcome(sent, time.monotonic(), self.protocol, model, kind, detail)

    def _classify(self, status: str, text: str) -> tuple[str, str]:
        detail = f"{status}: {text}"[:300]
        if any(s in text for s in _REFUSED) or status == "ConnectionRefusedError":
            return "refused", detail
        if "DEADLINE_EXCEEDED" in status or "imeout" in status:
            return "hang", detail
        if status.isdigit() or (status.startswith("StatusCode.") and not _lost(text)):
            return "error", detail
        return "lost", detail

    def close(self) -> None:
        self.client.close()


def _lost(text: str) -> bool:
    return any(s in text for s in _LOST)


@dataclass
class Load:
    """``clients`` threads (HTTP, gRPC, HTTP, ...; the ``models`` in turn), each sending
    up to ``per_client`` requests one after another until :meth:`stop`; with
    ``until_refused`` a thread also stops at its first refused request."""

    server: Server
    models: list[str]
    clients: int
    per_client: int
    timeout_s: float
    until_refused: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for i in range(self.clients):
            protocol = ("http", "grpc")[i % 2]
            model = self.models[(i // 2) % len(self.models)]
            thread = threading.Thread(target=self._run, args=(protocol, model, i), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, protocol: str, model: str, seed: int) -> None:
        client = Client(protocol, self.server, self.timeout_s, seed)
        for _ in range(self.per_client):
            if self._stop.is_set():
                break
            outcome = client.infer(model)
            self.outcomes.append(outcome)
            if self.until_refused and outcome.kind == "refused":
                break
        client.close()

    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def stop(self, timeout_s: float) -> None:
        """Stop after the requests in flight; each thread is waited for ``timeout_s``."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)


@dataclass(slots=True)
class Sample:
    """One readiness answer: ``ready`` is None when there was no HTTP answer."""

    sent: float
    path: str
    ready: bool | None


class Readiness(threading.Thread):
    """Polls each of ``paths`` in turn on one keep-alive connection, a poll every
    ``interval_s``, until :meth:`stop`; ``samples`` in order."""

    def __init__(self, port: int, paths: list[str], interval_s: float) -> None:
        super().__init__(daemon=True)
        self.port, self.paths, self.interval_s = port, paths, interval_s
        self.samples: list[Sample] = []
        self._halt = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        for step in range(MAX_STEPS):
            if self._halt.wait(self.interval_s):
                break
            path = self.paths[step % len(self.paths)]
            sent = time.monotonic()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                self.samples.append(Sample(sent, path, response.status == 200))
            except OSError:
                connection.close()
                self.samples.append(Sample(sent, path, None))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.002
) -> None:
    """Poll ``condition`` every ``every_s`` until it holds; raises TimeoutError after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(every_s)


def counts(outcomes: list[Outcome]) -> collections.Counter[str]:
    return collections.Counter(o.kind for o in outcomes)


def failures(outcomes: list[Outcome]) -> list[str]:
    """Every failure kind, protocol and text, with how many times it occurred."""
    texts = collections.Counter(
        f"{o.kind} ({o.protocol}) {o.detail}" for o in outcomes if o.kind != "ok"
    )
    return [f"{n} x {text}" for text, n in texts.most_common()]


def incidents(outcomes: list[Outcome], events: list[tuple[float, str]]) -> list[str]:
    """Each lost, hung or wrong request (the first 20), placed after the last of
    ``events`` (time, name) before it was sent."""
    lines = []
    for o in outcomes:
        if o.kind in ("lost", "hang", "wrong"):
            at, name = max(((t, n) for t, n in events if t <= o.sent), default=(o.sent, "?"))
            lines.append(
                f"{o.kind}: {o.protocol} request to {o.model} sent {(o.sent - at) * 1000:.1f} ms "
                f"after {name}, ended {(o.done - o.sent) * 1000:.1f} ms later: {o.detail}"
            )
    return lines[:20] + [f"... and {len(lines) - 20} more"] * (len(lines) > 20)


def listed(title: str, lines: list[str]) -> list[str]:
    """A titled markdown list (``none`` when empty)."""
    return [title, "", *(f"- {line}" for line in lines or ["none"]), ""]


# --- 1. a killed model process ------------------------------------------------------


@dataclass
class Kill:
    """One SIGKILL: its time, the first answer after it, the outcomes that ended before
    the next kill, and the readiness samples in that window."""

    at: float
    answered: float
    outcomes: list[Outcome]
    samples: list[Sample]


def kill_scenario(options: argparse.Namespace, tmp: Path) -> list[str]:
    server = Server(repository(tmp / "kill"), [], tmp / "kill.log")
    paths = [f"/v2/models/{MODEL}/ready", "/v2/health/ready"]
    poller = Readiness(server.http, paths, options.ready_poll_ms / 1000)
    poller.start()
    load = Load(server, [MODEL], options.kill_clients, 10**7, options.request_timeout).start()
    kills: list[tuple[float, float]] = []
    stuck = []
    try:
        for number in range(1, options.kills + 1):
            try:
                kills.append(kill_once(server, load, poller, options.request_timeout))
            except TimeoutError as exc:
                stuck.append(f"kill {number}: {exc}")
                break
    finally:
        load.stop(options.request_timeout)
        poller.stop()
        status = server.stop()
    windows = [*(at for at, _ in kills[1:]), time.monotonic()]
    report = [
        Kill(
            at,
            first,
            [o for o in load.outcomes if at <= o.done < end],
            [s for s in poller.samples if at <= s.sent < end],
        )
        for (at, first), end in zip(kills, windows, strict=True)
    ]
    events = [(at, f"kill {n}") for n, (at, _) in enumerate(kills, 1)]
    notes = stuck + incidents(load.outcomes, events)
    return kill_table(options, report, load.outcomes, status) + listed("Incidents:", notes)


def interpreter_start() -> float:
    """Median seconds of three starts of a Python that imports what a model child needs."""
    times = []
    for _ in range(3):
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", "import numpy, triton_python_backend_utils"], check=True
        )
        times.append(time.monotonic() - began)
    return statistics.median(times)


def kill_once(
    server: Server, load: Load, poller: Readiness, timeout_s: float
) -> tuple[float, float]:
    """Once ``load`` has 50 more answers, SIGKILL the model's child; wait for the first
    right answer to a request sent after that, then for readiness. Returns (kill time,
    that answer's time); TimeoutError when either does not come within ``timeout_s``."""
    settled = len(load.outcomes) + 50
    wait_for(lambda: len(load.outcomes) > settled, timeout_s, "load before the kill")
    wait_for(lambda: len(server.stubs()) == 1, timeout_s, "one model process", 0.05)
    (pid,) = server.stubs()
    seen, at = len(load.outcomes), time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def answers() -> list[float]:
        return [o.done for o in load.outcomes[seen:] if o.kind == "ok" and o.sent >= at]

    wait_for(lambda: bool(answers()), timeout_s, "a right answer after the kill")
    wait_for(lambda: bool(poller.samples[-1].ready), timeout_s, "readiness after the kill")
    time.sleep(0.5)  # answers and readiness after the restart, in this kill's window
    return at, min(answers())


def readiness_story(kill: Kill, path: str) -> tuple[str, float | None, bool]:
    """What ``path`` said after ``kill``: a cell (ms from the kill to the first not ready
    and to ready again, and any ready answer in between), when it was ready again, and
    whether it was honest (not ready seen, ready again, no ready answer in between)."""
    samples = [s for s in kill.samples if s.path == path]
    down = [i for i, s in enumerate(samples) if s.ready is False]
    if not down:
        return "never not ready", None, False
    again = next((s.sent for s in samples[down[0] :] if s.ready), None)
    flaps = sum(1 for s in samples[down[0] : down[-1]] if s.ready is not False)
    cell = f"down +{(samples[down[0]].sent - kill.at) * 1000:.0f}, "
    cell += "never ready again" if again is None else f"ready +{(again - kill.at) * 1000:.0f}"
    if flaps:
        cell += f", {flaps} ready/no answer while down"
    return cell, again, again is not None and flaps == 0


def kill_table(
    options: argparse.Namespace, kills: list[Kill], outcomes: list[Outcome], status: int | None
) -> list[str]:
    model_path, health_path = f"/v2/models/{MODEL}/ready", "/v2/health/ready"
    lines = [
        f"## 1. Killed model process ({options.kills} x SIGKILL of the `{MODEL}` child, "
        f"{options.kill_clients} clients)",
        "",
        "`answers again`: seconds from the kill to the first right answer to a request sent "
        "after it. Readiness (`/v2/models/add_sub/ready`, `/v2/health/ready`, polled in turn "
        f"every {options.ready_poll_ms:g} ms): ms from the kill to the first not-ready answer "
        "and to ready again. Failed requests: sent before the kill (in flight) or after it; "
        "`failed after ready`: sent after the model was ready again. `honest`: the model "
        "turned not ready, then ready with no ready answer in between, and nothing sent after "
        "that failed.",
        "",
        "| kill | answers again (s) | model ready (ms) | server ready (ms) | failed: in flight "
        "| failed: sent after the kill | failed after ready | honest |",
        "| ---: | ---: | --- | --- | ---: | ---: | ---: | --- |",
    ]
    restart = []
    for number, kill in enumerate(kills, 1):
        model_cell, again, model_honest = readiness_story(kill, model_path)
        health_cell, _, _ = readiness_story(kill, health_path)
        failed = [o for o in kill.outcomes if o.kind != "ok"]
        late = [o for o in failed if again is not None and o.sent >= again]
        restart.append(kill.answered - kill.at)
        honest = "yes" if model_honest and not late else "NO"
        before = sum(o.sent < kill.at for o in failed)
        lines.append(
            f"| {number} | {restart[-1]:.3f} | {model_cell} | {health_cell} | {before} | "
            f"{len(failed) - before} | {len(late)} | {honest} |"
        )
    total = counts(outcomes)
    if restart:
        lines += [
            "",
            f"Time until a request sent after the kill is answered: min {min(restart):.3f} s, "
            f"median {statistics.median(restart):.3f} s, max {max(restart):.3f} s "
            f"(a bare `python -c 'import numpy, triton_python_backend_utils'`, the floor of "
            f"a child's start, takes {interpreter_start():.3f} s on this host now).",
        ]
    return [
        *lines,
        "",
        f"All requests: {dict(total)}; server exit status {status}.",
        "",
        *listed("Failures (count x kind (protocol) status: text):", failures(outcomes)),
    ]


# --- 2. SIGTERM with requests in flight ----------------------------------------------


def sigterm_scenario(
    options: argparse.Namespace, tmp: Path, grace_s: float
) -> tuple[str, list[str], list[str]]:
    """One SIGTERM under load: a table row, the failures' texts and the incidents."""
    root = repository(tmp / f"sigterm{grace_s:g}", options.slow_s)
    flags = [f"--shutdown-grace-period={grace_s:g}"] if grace_s else []
    server = Server(root, flags, tmp / f"sigterm{grace_s:g}.log")
    poller = Readiness(server.http, ["/v2/health/ready"], options.ready_poll_ms / 1000)
    load = Load(server, [SLOW, MODEL], options.concurrency, 10**6, options.request_timeout, True)
    try:
        poller.start()
        load.start()
        time.sleep(options.sigterm_after_s)
        began = time.monotonic()
        status = server.stop(grace_s + 30 + options.request_timeout)
        exited = time.monotonic()
        wait_for(lambda: not load.running(), options.request_timeout + 10, "clients after exit")
    finally:
        server.stop(10)  # at once when it has exited
        load.stop(options.request_timeout)
        poller.stop()
    after = [o for o in load.outcomes if o.done >= began]
    down = next((s.sent for s in poller.samples if s.sent >= began and not s.ready), None)
    kinds = counts(load.outcomes)
    answered = kinds["ok"] + kinds["error"] + kinds["wrong"]
    row = (
        f"| {grace_s:g} | {status} | {exited - began:.2f} | "
        + ("-" if down is None else f"{(down - began) * 1000:.0f}")
        + f" | {answered} | {kinds['ok']} | {sum(o.kind == 'ok' for o in after)} | "
        f"{kinds['error']} | {kinds['wrong']} | {kinds['lost']} | {kinds['hang']} | "
        f"{kinds['refused']} |"
    )
    events = [(began, "SIGTERM"), (exited, "the server's exit")]
    texts = [f"grace {grace_s:g} s: {line}" for line in failures(load.outcomes)]
    notes = [
        f"grace {grace_s:g} s (exit {(exited - began) * 1000:.0f} ms after SIGTERM): {line}"
        for line in incidents(load.outcomes, events)
    ]
    return row, texts, notes


def sigterm_table(options: argparse.Namespace, tmp: Path) -> list[str]:
    runs = [sigterm_scenario(options, tmp, grace) for grace in (0.0, options.grace_s)]
    return [
        f"## 2. SIGTERM with requests in flight ({options.concurrency} clients, half on "
        f"`{SLOW}` sleeping {options.slow_s:g} s per request in 2 instances, half on "
        f"`{MODEL}`; SIGTERM after {options.sigterm_after_s:g} s)",
        "",
        "`not ready after`: ms from SIGTERM to the first `/v2/health/ready` that was not "
        "200; `ok after SIGTERM`: right answers that arrived after it; `refused`: requests "
        "never sent (the port was closed), which ends each client.",
        "",
        "| grace period (s) | exit status | exit after (s) | not ready after (ms) | answered | "
        "ok | ok after SIGTERM | errors | wrong | lost | hangs | refused |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(row for row, _, _ in runs),
        "",
        *listed(
            "Failures, both runs (count x kind (protocol) status: text):",
            [text for _, texts, _ in runs for text in texts],
        ),
        *listed("Incidents:", [note for _, _, notes in runs for note in notes]),
    ]


# --- 3. reloads under load -------------------------------------------------------------

#: A reload made while clients run: when it began, its name, its failure ("" if none).
Reload = tuple[float, str, str]


def explicit_reloads(server: Server, load: Load) -> Iterator[Reload]:
    """``load`` of the loaded model, back to back while ``load`` runs."""
    control = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=120)
    try:
        for number in range(1, MAX_STEPS):
            if not load.running():
                break
            began = time.monotonic()
            try:
                control.load_model(MODEL)
                yield began, f"load {number}", ""
            except InferenceServerException as exc:
                yield began, f"load {number}", str(exc)
    finally:
        control.close()


def poll_reloads(server: Server, load: Load, root: Path, timeout_s: float) -> Iterator[Reload]:
    """While ``load`` runs, in turn: add version 2, change the config, remove version 2;
    each change is waited for (metadata versions and config) before the next."""
    control = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}")
    folder = root / MODEL

    def add_version(revision: int) -> list[str]:
        staging = root / "staging"
        staging.mkdir()
        shutil.copy(folder / "1/model.py", staging / "model.py")
        staging.rename(folder / "2")  # whole, never half written
        return ["2"]

    def change_config(revision: int) -> list[str]:
        staging = root / "config.staging"
        staging.write_text(model_config(MODEL, revision=revision))
        staging.replace(folder / "config.pbtxt")
        return ["2"] if (folder / "2").exists() else ["1"]

    def remove_version(revision: int) -> list[str]:
        shutil.rmtree(folder / "2")
        return ["1"]

    def taken(versions: list[str], revision: int) -> bool:
        try:
            metadata = control.get_model_metadata(MODEL)
            parameters = control.get_model_config(MODEL)["parameters"]
        except InferenceServerException:
            return False
        return bool(
            metadata["versions"] == versions
            and parameters["revision"]["string_value"] == str(revision)
        )

    changes = (add_version, change_config, remove_version)
    try:
        for number in range(1, MAX_STEPS):
            if not load.running():
                break
            change = changes[(number - 1) % 3]
            revision = (number + 1) // 3  # the config's: changed at 2, 5, 8, ...
            began = time.monotonic()
            versions = change(revision)
            name = f"{change.__name__} {number}"
            try:
                wait_for(functools.partial(taken, versions, revision), timeout_s, name, 0.05)
                yield began, name, ""
            except TimeoutError as exc:
                yield began, name, str(exc)
    finally:
        control.close()


def reload_scenario(
    options: argparse.Namespace, tmp: Path, mode: str
) -> tuple[str, list[str], list[str]]:
    """Reloads in ``mode`` under load: a table row, the failures' texts and the
    incidents."""
    root = repository(tmp / f"reload_{mode}")
    flags = {
        "explicit": ["--model-control-mode=explicit", f"--load-model={MODEL}"],
        "poll": ["--model-control-mode=poll", "--repository-poll-secs=1"],
    }[mode]
    server = Server(root, flags, tmp / f"reload_{mode}.log")
    per_client = options.reload_requests // 2 // options.reload_clients
    began = time.monotonic()
    load = Load(server, [MODEL], options.reload_clients, per_client, options.request_timeout)
    load.start()
    try:
        if mode == "explicit":
            reloads = list(explicit_reloads(server, load))
        else:
            reloads = list(poll_reloads(server, load, root, options.request_timeout))
        load.stop(options.request_timeout)
    finally:
        status = server.stop()
    seconds = time.monotonic() - began
    kinds = counts(load.outcomes)
    versions = collections.Counter(o.detail for o in load.outcomes if o.kind == "ok")
    failed = [f"{name}: {text}" for _, name, text in reloads if text]
    row = (
        f"| {mode} | {len(load.outcomes)} | {kinds['ok']} | {kinds['error']} | "
        f"{kinds['wrong']} | {kinds['lost']} | {kinds['hang']} | {kinds['refused']} | "
        f"{len(reloads) - len(failed)} | {len(failed)} | {seconds:.0f} | "
        f"{len(load.outcomes) / seconds:.0f} | "
        + ", ".join(f"v{v}: {n}" for v, n in sorted(versions.items()))
        + f" | {status} |"
    )
    texts = [f"{mode}: {line}" for line in failures(load.outcomes) + failed]
    events = [(at, name) for at, name, _ in reloads]
    return row, texts, [f"{mode}: {line}" for line in incidents(load.outcomes, events)]


def reload_table(options: argparse.Namespace, tmp: Path) -> list[str]:
    runs = [reload_scenario(options, tmp, mode) for mode in ("explicit", "poll")]
    return [
        f"## 3. Reloads under load ({options.reload_requests} requests, half per mode, "
        f"{options.reload_clients} clients)",
        "",
        "explicit: `load` of the loaded model back to back; poll (`--repository-poll-secs=1`): "
        "version 2 added, config changed, version 2 removed, in turn, each change waited "
        "for. `reloads`: loads that succeeded / changes the server took in.",
        "",
        "| mode | requests | ok | errors | wrong | lost | hangs | refused | reloads | "
        "failed reloads | seconds | requests/s | ok by version | exit status |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | ---: |",
        *(row for row, _, _ in runs),
        "",
        *listed(
            "Failures and failed reloads (count x kind (protocol) status: text):",
            [text for _, texts, _ in runs for text in texts],
        ),
        *listed("Incidents:", [note for _, _, notes in runs for note in notes]),
    ]


# --- the report ------------------------------------------------------------------------


def header(load: tuple[float, float, float]) -> list[str]:
    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    return [
        "# Reliability: killed model process, SIGTERM drain, reloads under load",
        "",
        f"- date: {stamp}",
        f"- host: {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in load)} at the start (a shared VM: other work runs)",
        f"- commit: {commit}" + (" with uncommitted changes in the tree" if dirty else ""),
        f"- command: `{command}`",
        "- model: Python `add_sub` in process mode (one child process per instance), "
        "FP32 [4]; clients: tritonclient threads, HTTP and gRPC in turn, one request at a time",
        "",
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="kill,sigterm,reload", help="scenarios to run")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the model process")
    parser.add_argument("--kill-clients", type=int, default=4, help="clients during kills")
    parser.add_argument("--ready-poll-ms", type=float, default=5.0, help="readiness polling")
    parser.add_argument("--concurrency", type=int, default=16, help="clients at SIGTERM")
    parser.add_argument("--slow-s", type=float, default=0.5, help="the slow model's sleep")
    parser.add_argument("--sigterm-after-s", type=float, default=3.0, help="load before it")
    parser.add_argument("--grace-s", type=float, default=2.0, help="--shutdown-grace-period")
    parser.add_argument(
        "--reload-requests", type=int, default=100_000, help="requests in all, half per mode"
    )
    parser.add_argument("--reload-clients", type=int, default=4, help="clients during reloads")
    parser.add_argument("--request-timeout", type=float, default=30.0, help="then a hang")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "reliability.md")
    parser.add_argument("--logs", type=Path, help="keep the servers' logs in this folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    lines = header(os.getloadavg())
    scenarios = {"kill": kill_scenario, "sigterm": sigterm_table, "reload": reload_table}
    with tempfile.TemporaryDirectory(prefix="reliability") as name:
        tmp = Path(name)
        try:
            for scenario in options.only.split(","):
                part = scenarios[scenario](options, tmp)
                print("\n".join(part), flush=True)
                lines += part
        finally:
            if options.logs:
                options.logs.mkdir(parents=True, exist_ok=True)
                for log in tmp.glob("*.log"):
                    shutil.copy(log, options.logs / log.name)
    options.output.write_text("\n".join(lines))
    print(f"written to {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
