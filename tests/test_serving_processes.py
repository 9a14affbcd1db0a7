"""``despina serve --serving-processes 2``: a supervisor and two serving processes sharing
the HTTP and gRPC ports, with real clients: requests reach both processes, statistics
(HTTP and gRPC) and metrics are their sums, each sequence runs in the process that owns
its correlation ID, whichever receives its requests, client shared-memory registrations,
log and trace settings, explicit model control and poll mode's changes reach every
process, SIGTERM stops
everything cleanly, and a serving process that dies stops the supervisor with a failure."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.serving.sequence_routing import owner_of
from despina.testing import RepositoryBuilder, free_port

tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

#: Seconds a supervisor gets to start both serving processes on a busy host.
START_S = 300
#: Seconds a supervisor gets to stop.
STOP_S = 120

#: OUTPUT0 = INPUT0 + 1, and PID: the serving process that ran the request (the model
#: runs in a stub process the serving process started).
PID_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = pb_utils.Tensor("PID", np.array([os.getppid()], np.int64))
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + 1), pid]))
        return responses
"""
PID_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""
#: A sequence's running sum (OUTPUT0: INPUT0 summed over the sequence so far, kept in the
#: model process of the serving process that runs the sequence), and PID as above. Four
#: sequences may be open at once in each serving process (one instance of four slots).
SEQUENCE_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        pid = pb_utils.Tensor("PID", np.array([[os.getppid()]], np.int64))
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            key = request.correlation_id()
            total = a + (0 if request.flags() & 1 else self.sums.get(key, 0))
            self.sums[key] = total
            out = pb_utils.Tensor("OUTPUT0", total.astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out, pid]))
        return responses
"""
SEQUENCE_CONFIG = """
backend: "python"
max_batch_size: 4
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching { max_sequence_idle_microseconds: 60000000 }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""
#: A decoupled sequence model: for INPUT0 of value n, n responses (INPUT0 + k for k < n,
#: and PID), then the final flag alone.
DECOUPLED_SEQUENCE_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = pb_utils.Tensor("PID", np.array([[os.getppid()]], np.int64))
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for k in range(int(a[0, 0])):
                out = pb_utils.Tensor("OUTPUT0", (a + k).astype(np.float32))
                sender.send(pb_utils.InferenceResponse([out, pid]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
DECOUPLED_SEQUENCE_CONFIG = SEQUENCE_CONFIG + "model_transaction_policy { decoupled: true }\n"
#: A model that fails to load in every serving process.
BROKEN_MODEL = PID_MODEL.replace(
    "class TritonPythonModel:\n",
    "class TritonPythonModel:\n"
    "    def initialize(self, args):\n"
    "        raise RuntimeError('this model never loads')\n\n",
)


@dataclass
class Supervised:
    """A running ``despina serve --serving-processes 2``."""

    process: subprocess.Popen[bytes]
    log: Path
    http: int
    grpc: int
    metrics: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def child_pids(self) -> list[int]:
        found = re.search(r"started \d+ serving processes: pids ([\d, ]+)", self.output())
        assert found, self.output()
        return [int(pid) for pid in found.group(1).split(", ")]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_S)


def start(repository: Path, log: Path, *flags: str, count: int = 2) -> Supervised:
    """Start a supervisor of ``count`` serving processes on free ports of 127.0.0.1."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "despina",
        "serve",
        f"--model-repository={repository}",
        f"--serving-processes={count}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        "--allow-gpu-metrics=false",
        *flags,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    return Supervised(process, log, http, grpc, metrics)


def wait_serving(supervised: Supervised) -> None:
    """Wait until statistics answer: both serving processes have started (each answers
    its peer only once it serves)."""
    deadline = time.monotonic() + START_S
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    try:
        while time.monotonic() < deadline:
            assert supervised.process.poll() is None, supervised.output()
            try:
                client.get_inference_statistics("add_sub")
                return
            except (InferenceServerException, OSError):
                time.sleep(0.5)
    finally:
        client.close()
    raise AssertionError(f"not serving after {START_S} s:\n{supervised.output()}")


@contextlib.contextmanager
def serving(repository: Path, log: Path, *flags: str, count: int = 2) -> Iterator[Supervised]:
    """A supervisor of ``count`` serving processes, serving; killed if it still runs after."""
    running = start(repository, log, *flags, count=count)
    try:
        wait_serving(running)
        yield running
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait(STOP_S)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    builder = RepositoryBuilder(tmp_path_factory.mktemp("serving_processes") / "models")
    builder.add("add_sub", PID_CONFIG, {"1/model.py": PID_MODEL})
    builder.add("sequence", SEQUENCE_CONFIG, {"1/model.py": SEQUENCE_MODEL})
    builder.add("streams", DECOUPLED_SEQUENCE_CONFIG, {"1/model.py": DECOUPLED_SEQUENCE_MODEL})
    builder.add("broken", PID_CONFIG, {"1/model.py": BROKEN_MODEL})
    return builder.root


@pytest.fixture(scope="module")
def supervised(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    log = tmp_path_factory.mktemp("supervised") / "serve.log"
    with serving(repository, log, "--exit-on-error=false", "--allow-client-shm=true") as running:
        yield running


def http_infer(port: int) -> int:
    """One request over a new connection; the serving process that ran it."""
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        tensor = tritonclient_http.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        result = client.infer("add_sub", [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == [2.0] * 4
        return int(result.as_numpy("PID")[0])
    finally:
        client.close()


def grpc_infer(port: int) -> int:
    """One request over a new gRPC connection (a channel of its own, not the process's
    shared subchannel); the serving process that ran it."""
    client = tritonclient_grpc.InferenceServerClient(
        f"127.0.0.1:{port}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
    )
    try:
        tensor = tritonclient_grpc.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        result = client.infer("add_sub", [tensor])
        return int(result.as_numpy("PID")[0])
    finally:
        client.close()


def statistics(supervised: Supervised) -> list[dict[str, Any]]:
    """``add_sub``'s statistics over HTTP and over gRPC, each asked over several new
    connections (so both serving processes answer some)."""
    answers = []
    for _ in range(4):
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
        answers.append(client.get_inference_statistics("add_sub")["model_stats"][0])
        client.close()
        channel = tritonclient_grpc.InferenceServerClient(
            f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        stats = channel.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
        channel.close()
        answers.append(_as_ints(stats))
    return answers


def _as_ints(value: Any) -> Any:
    """gRPC's JSON writes uint64 as strings; the HTTP answer's numbers."""
    if isinstance(value, dict):
        return {key: _as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_ints(item) for item in value]
    return int(value) if isinstance(value, str) and value.isdigit() else value


def test_both_processes_serve_and_statistics_are_summed(supervised: Supervised) -> None:
    pids: list[int] = []
    for _ in range(40):  # connections hash to either process; two seen ends it
        pids += [http_infer(supervised.http), grpc_infer(supervised.grpc)]
        if len(set(pids)) == 2:
            break
    assert len(set(pids)) == 2, pids
    sent = len(pids)
    for stats in statistics(supervised):
        assert stats["inference_count"] == sent
        assert stats["execution_count"] == sent
        inference = stats["inference_stats"]
        assert inference["success"]["count"] == sent
        assert inference["queue"]["count"] == sent
        assert inference["compute_infer"]["count"] == sent
        assert inference["success"]["ns"] > 0
        (batch,) = stats["batch_stats"]
        assert batch["batch_size"] == 1
        assert batch["compute_infer"]["count"] == sent
        assert stats["last_inference"] > 0
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    every = client.get_inference_statistics()["model_stats"]  # /v2/models/stats
    versioned = client.get_inference_statistics("add_sub", "1")["model_stats"]
    client.close()
    (add_sub,) = [entry for entry in every if entry["name"] == "add_sub"]
    assert add_sub["inference_count"] == versioned[0]["inference_count"] == sent
    with urllib.request.urlopen(f"http://127.0.0.1:{supervised.metrics}/metrics") as page:
        text = page.read().decode()
    assert f'nv_inference_request_success{{model="add_sub",version="1"}} {sent}\n' in text
    assert f'nv_inference_count{{model="add_sub",version="1"}} {sent}\n' in text
    assert 'nv_inference_pending_request_count{model="add_sub",version="1"} 0\n' in text
    assert text.count("# TYPE nv_inference_count counter") == 1


def test_unknown_model_statistics_keep_their_error(supervised: Supervised) -> None:
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    try:
        with pytest.raises(InferenceServerException, match="requested model 'nope'"):
            client.get_inference_statistics("nope")
    finally:
        client.close()


def sequence_step(supervised: Supervised, corrid: int | str, step: int, use_grpc: bool) -> Any:
    """Step ``step`` (0, 1, 2: START, middle, END) of sequence ``corrid``, input ``step +
    1``, over a new connection; the output and the serving process that ran it."""
    data = np.full((1, 4), step + 1, np.float32)
    start, end = step == 0, step == 2
    if use_grpc:
        client: Any = tritonclient_grpc.InferenceServerClient(
            f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        tensor: Any = tritonclient_grpc.InferInput("INPUT0", [1, 4], "FP32")
    else:
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
        tensor = tritonclient_http.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(data)
    try:
        result = client.infer(
            "sequence", [tensor], sequence_id=corrid, sequence_start=start, sequence_end=end
        )
        return result.as_numpy("OUTPUT0")[0].tolist(), int(result.as_numpy("PID")[0, 0])
    finally:
        client.close()


def test_each_sequence_runs_in_the_serving_process_that_owns_it(supervised: Supervised) -> None:
    """Sequences of integer (HTTP) and string (gRPC) correlation IDs, their requests
    interleaved, each over a new connection that may reach either process: every
    sequence's running sum is right (its state stayed in one process), the same owner
    runs the same IDs, both processes own some, and each request is counted once."""
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    before = client.get_inference_statistics("sequence")["model_stats"][0]["inference_count"]
    names = (f"session-{n}" for n in range(8))
    sequences: list[int | str] = [
        c for pair in zip(range(101, 109), names, strict=True) for c in pair
    ]
    ran: dict[int | str, set[int]] = {corrid: set() for corrid in sequences}
    for first in range(0, len(sequences), 4):  # four open at once: a process has 4 slots
        for step in range(3):
            for corrid in sequences[first : first + 4]:
                output, pid = sequence_step(supervised, corrid, step, isinstance(corrid, str))
                assert output == [float(sum(range(1, step + 2)))] * 4, (corrid, step)
                ran[corrid].add(pid)
    assert all(len(pids) == 1 for pids in ran.values()), ran
    children = supervised.child_pids()
    owners = {corrid: next(iter(pids)) for corrid, pids in ran.items()}
    assert owners == {corrid: children[owner_of(corrid, 2) or 0] for corrid in sequences}
    assert set(owners.values()) == set(children)
    after = client.get_inference_statistics("sequence")["model_stats"][0]["inference_count"]
    client.close()
    assert after - before == 3 * len(sequences)


def test_a_forwarded_request_keeps_its_error(supervised: Supervised) -> None:
    """A sequence's next request without its START, over new connections (forwarded or
    not): Triton's 400 / INVALID_ARGUMENT text, and the server serves on."""
    for attempt in range(6):
        corrid = 9001 + attempt
        with pytest.raises(InferenceServerException) as raised:
            sequence_step(supervised, corrid, 1, use_grpc=attempt % 2 == 1)
        assert (
            f"inference request for sequence {corrid} to model 'sequence' must specify the START"
            in str(raised.value)
        )
        assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert sequence_step(supervised, 9100, 0, use_grpc=False)[0] == [1.0] * 4
    assert sequence_step(supervised, 9100, 2, use_grpc=True)[0] == [4.0] * 4


def stream_step(supervised: Supervised, corrid: int, step: int) -> list[tuple[float, int, bool]]:
    """Step ``step`` of sequence ``corrid`` of the decoupled model, input ``step + 1``, over
    a new gRPC stream: (OUTPUT0[0], PID, final) of every response, the empty final one
    included."""
    client = tritonclient_grpc.InferenceServerClient(
        f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
    )
    received: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put(error or result))
    tensor = tritonclient_grpc.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), step + 1, np.float32))
    answers: list[tuple[float, int, bool]] = []
    try:
        client.async_stream_infer(
            "streams",
            [tensor],
            sequence_id=corrid,
            sequence_start=step == 0,
            sequence_end=step == 2,
            enable_empty_final_response=True,
        )
        while not answers or not answers[-1][2]:
            result = received.get(timeout=60)
            assert not isinstance(result, InferenceServerException), result
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if final and not response.outputs:
                answers.append((0.0, 0, True))
                continue
            output = result.as_numpy("OUTPUT0")
            answers.append((float(output[0, 0]), int(result.as_numpy("PID")[0, 0]), final))
    finally:
        client.stop_stream()
        client.close()
    return answers


def test_a_forwarded_decoupled_sequence_streams_every_response(supervised: Supervised) -> None:
    """A decoupled sequence model over new gRPC streams: every response of a forwarded
    request comes back in order, then the final flag alone; one process runs each
    sequence."""
    ran: dict[int, set[int]] = {}
    for step in range(3):
        for corrid in (301, 302, 303, 304):
            answers = stream_step(supervised, corrid, step)
            values = [value for value, _, _ in answers[:-1]]
            assert values == [float(step + 1 + k) for k in range(step + 1)], answers
            assert answers[-1] == (0.0, 0, True)
            assert not any(final for _, _, final in answers[:-1])
            ran.setdefault(corrid, set()).update(pid for _, pid, _ in answers[:-1])
    children = supervised.child_pids()
    assert ran == {corrid: {children[corrid % 2]} for corrid in (301, 302, 303, 304)}


def shm_infer(supervised: Supervised, use_grpc: bool) -> int:
    """One request over a new connection, INPUT0 read from region ``sp_in`` and OUTPUT0
    written to ``sp_out``; the serving process that ran it."""
    module = tritonclient_grpc if use_grpc else tritonclient_http
    if use_grpc:
        client: Any = tritonclient_grpc.InferenceServerClient(
            f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
    else:
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    try:
        tensor = module.InferInput("INPUT0", [4], "FP32")
        tensor.set_shared_memory("sp_in", 16)
        output = module.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("sp_out", 16)
        result = client.infer(
            "add_sub", [tensor], outputs=[output, module.InferRequestedOutput("PID")]
        )
        return int(result.as_numpy("PID")[0])
    finally:
        client.close()


def shm_status(supervised: Supervised) -> list[list[str]]:
    """The registered system regions' names, asked over new connections of both
    protocols (both serving processes answer some)."""
    names = []
    for _ in range(4):
        http = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
        names.append(sorted(r["name"] for r in http.get_system_shared_memory_status()))
        http.close()
        grpc = tritonclient_grpc.InferenceServerClient(
            f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
        )
        names.append(sorted(grpc.get_system_shared_memory_status(as_json=True).get("regions", {})))
        grpc.close()
    return names


def test_shared_memory_registrations_reach_every_serving_process(supervised: Supervised) -> None:
    """A region registered over one connection serves requests that reach either process;
    one unregistered over one connection is gone from both; a registration that fails
    leaves it in neither."""
    shm = pytest.importorskip("tritonclient.utils.shared_memory")
    key = f"/despina_sp_{os.getpid()}"
    inputs = shm.create_shared_memory_region("sp_in", f"{key}_in", 16)
    outputs = shm.create_shared_memory_region("sp_out", f"{key}_out", 16)
    http = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    grpc = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{supervised.grpc}")
    try:
        with pytest.raises(InferenceServerException, match="Unable to open shared memory"):
            http.register_system_shared_memory("sp_bad", f"{key}_missing", 16)
        assert shm_status(supervised) == [[]] * 8
        http.register_system_shared_memory("sp_in", f"{key}_in", 16)
        grpc.register_system_shared_memory("sp_out", f"{key}_out", 16)
        assert shm_status(supervised) == [["sp_in", "sp_out"]] * 8
        pids = set()
        for step in range(12):
            values = np.arange(4, dtype=np.float32) * step
            shm.set_shared_memory_region(inputs, [values])
            pids.add(shm_infer(supervised, use_grpc=step % 2 == 1))
            got = shm.get_contents_as_numpy(outputs, np.float32, [4])
            assert got.tolist() == (values + 1).tolist()
        assert pids == set(supervised.child_pids())
        grpc.unregister_system_shared_memory("sp_in")
        http.unregister_system_shared_memory("sp_out")
        assert shm_status(supervised) == [[]] * 8
        for use_grpc in (False, True, False, True):
            with pytest.raises(InferenceServerException, match="sp_in"):
                shm_infer(supervised, use_grpc)
    finally:
        http.unregister_system_shared_memory()
        http.close()
        grpc.close()
        shm.destroy_shared_memory_region(inputs)
        shm.destroy_shared_memory_region(outputs)


def test_log_and_trace_settings_reach_every_serving_process(supervised: Supervised) -> None:
    """Log and trace settings changed over one connection read back the same over new
    connections of both protocols (both processes answer some)."""
    http = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
    try:
        before_log = http.get_log_settings()
        before_rate = http.get_trace_settings()["trace_rate"]
        http.update_log_settings({"log_verbose_level": 3})
        http.update_trace_settings(settings={"trace_rate": "7"})
        seen = []
        for _ in range(4):
            one = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
            seen.append(
                (
                    one.get_log_settings()["log_verbose_level"],
                    one.get_trace_settings()["trace_rate"],
                )
            )
            one.close()
            channel = tritonclient_grpc.InferenceServerClient(
                f"127.0.0.1:{supervised.grpc}", channel_args=[("grpc.use_local_subchannel_pool", 1)]
            )
            log_settings = channel.get_log_settings(as_json=True)["settings"]
            trace = channel.get_trace_settings(as_json=True)["settings"]
            seen.append(
                (log_settings["log_verbose_level"]["uint32_param"], trace["trace_rate"]["value"][0])
            )
            channel.close()
        assert seen == [(3, "7")] * 8
    finally:
        http.update_log_settings({"log_verbose_level": before_log["log_verbose_level"]})
        http.update_trace_settings(settings={"trace_rate": before_rate})
        http.close()


def test_a_process_that_does_not_answer_fails_statistics_and_metrics(
    supervised: Supervised,
) -> None:
    """With serving process 0 stopped (SIGSTOP), a statistics call that process 1
    receives is UNAVAILABLE naming process 0, and a scrape is a 503: never a partial sum."""
    stopped = supervised.child_pids()[0]
    os.kill(stopped, signal.SIGSTOP)
    try:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"http://127.0.0.1:{supervised.metrics}/metrics")
        caught.value.close()
        assert caught.value.code == 503
        refusals = []
        for _ in range(40):  # new connections until one reaches process 1
            client = tritonclient_http.InferenceServerClient(
                f"127.0.0.1:{supervised.http}", connection_timeout=10, network_timeout=10
            )
            try:
                client.get_inference_statistics("add_sub")
            except InferenceServerException as exc:
                refusals.append(exc)
                break
            except OSError:  # reached the stopped process
                pass
            finally:
                client.close()
        (refusal,) = refusals
        assert refusal.status() == "503"
        assert "serving process 0 of --serving-processes 2 did not answer" in str(refusal)
    finally:
        os.kill(stopped, signal.SIGCONT)


def test_sigterm_stops_every_process_with_status_0(supervised: Supervised) -> None:
    children = supervised.child_pids()
    assert supervised.stop() == 0, supervised.output()
    output = supervised.output()
    assert re.search(r"^\[0\] .*successfully loaded 'add_sub'", output, re.MULTILINE)
    assert re.search(r"^\[1\] .*successfully loaded 'add_sub'", output, re.MULTILINE)
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _post(connection: http.client.HTTPConnection, model: str, body: dict[str, Any]) -> Any:
    connection.request("POST", f"/v2/models/{model}/infer", json.dumps(body))
    response = connection.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200, answer
    return {output["name"]: output["data"] for output in answer["outputs"]}


def test_sigterm_runs_a_forwarded_sequence_to_its_end(repository: Path, tmp_path: Path) -> None:
    """A sequence whose owner is the other process, its requests over one keep-alive HTTP
    connection: after SIGTERM its next requests are still forwarded and answered (the
    owner waits for the open sequence, the receiving process for its connection), then
    everything exits with status 0."""
    running = start(repository, tmp_path / "serve.log", "--exit-on-error=false")
    try:
        wait_serving(running)
        children = running.child_pids()
        connection = http.client.HTTPConnection("127.0.0.1", running.http, timeout=60)
        ones = {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1] * 4}
        here = children.index(_post(connection, "add_sub", {"inputs": [ones]})["PID"][0])
        corrid = next(c for c in range(501, 510) if owner_of(c, 2) != here)
        totals, pids = [], set()
        for step in range(3):
            parameters = {"sequence_id": corrid, "sequence_start": step == 0}
            parameters["sequence_end"] = step == 2
            data = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [step + 1] * 4}
            body = {"parameters": parameters, "inputs": [data]}
            outputs = _post(connection, "sequence", body)
            totals.append(outputs["OUTPUT0"][0])
            pids.add(outputs["PID"][0])
            if step == 0:
                running.process.send_signal(signal.SIGTERM)
                time.sleep(1)  # both processes are stopping before the next request
        connection.close()
        assert running.process.wait(STOP_S) == 0, running.output()
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait(STOP_S)
    assert totals == [1.0, 3.0, 6.0]
    assert pids == {children[1 - here]}
    assert "Waiting for in-flight requests to complete." in running.output()


def test_each_serving_process_writes_its_own_trace_file(repository: Path, tmp_path: Path) -> None:
    """``--trace-config triton,file=PATH``: serving process i writes ``PATH.process-i``
    (one file would interleave two processes' JSON); together they hold every request."""
    trace = tmp_path / "trace.json"
    flags = [
        f"--trace-config=triton,file={trace}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]
    running = start(repository, tmp_path / "serve.log", "--exit-on-error=false", *flags)
    try:
        wait_serving(running)
        served = {http_infer(running.http) for _ in range(12)}
        assert served == set(running.child_pids())
    finally:
        assert running.stop() == 0, running.output()
    assert not trace.exists()
    traced = {
        index: json.loads((tmp_path / f"trace.json.process-{index}").read_text())
        for index in (0, 1)
    }
    per_process = [sum(e.get("model_name") == "add_sub" for e in t) for t in traced.values()]
    assert all(count > 0 for count in per_process) and sum(per_process) == 12


def test_a_dying_serving_process_stops_the_supervisor(repository: Path, tmp_path: Path) -> None:
    running = start(repository, tmp_path / "serve.log", "--exit-on-error=false")
    try:
        wait_serving(running)
        first, second = running.child_pids()
        os.kill(first, signal.SIGKILL)
        assert running.process.wait(STOP_S) == 1
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait(STOP_S)
    assert "serving process 0 exited (status -9): stopping the others" in running.output()
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)


def test_a_model_refused_at_load_fails_the_start_with_exit_on_error(
    repository: Path, tmp_path: Path
) -> None:
    """The broken model fails to load in both processes; with ``--exit-on-error=true``
    (the default) they exit, and the supervisor with status 1."""
    running = start(repository, tmp_path / "serve.log")
    try:
        assert running.process.wait(START_S) == 1
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait(STOP_S)
    assert "this model never loads" in running.output()
    assert "exited (status 1): stopping the others" in running.output()


#: PID_CONFIG as a load's config override.
PID_CONFIG_JSON = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "PID", "data_type": "TYPE_INT64", "dims": [1]},
        ],
    }
)
#: add_sub's PID model as a reload changes it: OUTPUT0 = INPUT0 + 2.
PLUS_TWO = PID_MODEL.replace("a + 1", "a + 2")
#: A model whose initialize fails in serving process 1 only.
FAILS_IN_PROCESS_1 = PID_MODEL.replace(
    "class TritonPythonModel:\n",
    "class TritonPythonModel:\n"
    "    def initialize(self, args):\n"
    "        if os.environ['DESPINA_SERVING_PROCESS'].startswith('1:'):\n"
    "            raise RuntimeError('initialize fails in serving process 1')\n\n",
)


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    """Three serving processes in explicit model control (so that a load failing in one
    finds another prepared, which must drop it), add_sub loaded at start, ``late`` and
    ``fails_in_1`` in the repository."""
    root = tmp_path_factory.mktemp("explicit")
    builder = RepositoryBuilder(root / "models")
    builder.add("add_sub", PID_CONFIG, {"1/model.py": PID_MODEL})
    builder.add("late", PID_CONFIG, {"1/model.py": PID_MODEL})
    builder.add("fails_in_1", PID_CONFIG, {"1/model.py": FAILS_IN_PROCESS_1})
    flags = ("--model-control-mode=explicit", "--load-model=add_sub", "--exit-on-error=false")
    with serving(builder.root, root / "serve.log", *flags, count=3) as running:
        yield running


def answers(supervised: Supervised, model: str) -> tuple[set[float], set[int]]:
    """OUTPUT0[0] for an input of ones and the serving process, over 24 new connections of
    both protocols (every process answers some)."""
    outputs, pids = set(), set()
    for step in range(24):
        if step % 2:
            client: Any = tritonclient_grpc.InferenceServerClient(
                f"127.0.0.1:{supervised.grpc}",
                channel_args=[("grpc.use_local_subchannel_pool", 1)],
            )
            module: Any = tritonclient_grpc
        else:
            client, module = (
                tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}"),
                tritonclient_http,
            )
        try:
            tensor = module.InferInput("INPUT0", [4], "FP32")
            tensor.set_data_from_numpy(np.ones(4, np.float32))
            result = client.infer(model, [tensor])
            outputs.add(float(result.as_numpy("OUTPUT0")[0]))
            pids.add(int(result.as_numpy("PID")[0]))
        finally:
            client.close()
    return outputs, pids


def refusals(supervised: Supervised, model: str) -> list[str]:
    """The error texts of a request to ``model`` over 8 new HTTP connections."""
    texts = []
    for _ in range(8):
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{supervised.http}")
        tensor = tritonclient_http.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        try:
            with pytest.raises(InferenceServerException) as caught:
                client.infer(model, [tensor])
            texts.append(str(caught.value))
        finally:
            client.close()
    return texts


def test_explicit_loads_reloads_and_unloads_reach_every_serving_process(
    explicit: Supervised,
) -> None:
    processes = set(explicit.child_pids())
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{explicit.http}")
    try:
        assert all("unknown model" in t or "not found" in t for t in refusals(explicit, "late"))
        client.load_model("late")
        assert answers(explicit, "late") == ({2.0}, processes)
        files = {"file:1/model.py": PLUS_TWO.encode()}
        client.load_model("late", config=PID_CONFIG_JSON, files=files)
        assert answers(explicit, "late") == ({3.0}, processes)
        client.unload_model("late")
        assert len(refusals(explicit, "late")) == 8
    finally:
        client.close()


def test_a_load_that_fails_in_one_serving_process_changes_none(explicit: Supervised) -> None:
    """A new model whose load fails in process 1 serves nowhere; a reload that fails in
    process 1 leaves the old version serving in all three (a process that prepared it
    dropped it)."""
    processes = set(explicit.child_pids())
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{explicit.http}")
    try:
        with pytest.raises(InferenceServerException, match=r"serving process 1|another serving"):
            client.load_model("fails_in_1")
        assert len(refusals(explicit, "fails_in_1")) == 8
    finally:
        client.close()
    failing = {"file:1/model.py": FAILS_IN_PROCESS_1.replace("a + 1", "a + 5").encode()}
    for _ in range(10):  # new connections: some reach process 0 or 2, whose peers prepare
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{explicit.http}")
        try:
            with pytest.raises(InferenceServerException, match="serving process 1"):
                client.load_model("add_sub", config=PID_CONFIG_JSON, files=failing)
        finally:
            client.close()
    assert answers(explicit, "add_sub") == ({2.0}, processes)
    # a process that had prepared the new version was told to drop it
    assert "loading 'add_sub' failed in another serving process" in explicit.output()


def wait_for(condition: Any, what: str, supervised: Supervised) -> None:
    """Wait up to :data:`START_S` for ``condition()`` (a poll acting on a change)."""
    deadline = time.monotonic() + START_S
    while not condition():
        assert supervised.process.poll() is None, supervised.output()
        assert time.monotonic() < deadline, f"{what}:\n{supervised.output()}"
        time.sleep(0.5)


def test_poll_mode_changes_every_serving_process_together(tmp_path: Path) -> None:
    """Poll mode under ``--serving-processes 2``: process 0 alone polls, and what it finds
    is loaded and unloaded in both: a changed model reloads in both; a change whose load
    fails in process 1 leaves the old version serving in both (polling alone, process 0
    would have switched); a new folder loads in both, a removed one unloads from both."""
    builder = RepositoryBuilder(tmp_path / "models")
    model_py = builder.add("add_sub", PID_CONFIG, {"1/model.py": PID_MODEL}) / "1" / "model.py"
    flags = ("--model-control-mode=poll", "--repository-poll-secs=1", "--exit-on-error=false")
    with serving(builder.root, tmp_path / "serve.log", *flags) as polled:
        processes = set(polled.child_pids())
        assert answers(polled, "add_sub") == ({2.0}, processes)

        model_py.write_text(PLUS_TWO)
        wait_for(lambda: answers(polled, "add_sub")[0] == {3.0}, "not reloaded", polled)
        assert answers(polled, "add_sub") == ({3.0}, processes)

        model_py.write_text(FAILS_IN_PROCESS_1.replace("a + 1", "a + 5"))
        wait_for(
            lambda: "'add_sub' keeps serving its previous versions" in polled.output(),
            "the failing change was not polled",
            polled,
        )
        assert answers(polled, "add_sub") == ({3.0}, processes)

        builder.add("late", PID_CONFIG, {"1/model.py": PID_MODEL})
        wait_for(lambda: "successfully loaded 'late'" in polled.output(), "no load", polled)
        assert answers(polled, "late") == ({2.0}, processes)
        shutil.rmtree(builder.root / "late")
        wait_for(lambda: "unloaded 'late'" in polled.output(), "no unload", polled)
        assert len(refusals(polled, "late")) == 8
        assert polled.stop() == 0


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (["--http-port=0"], "--http-port=0 is not supported"),
        (["--grpc-port=0"], "--grpc-port=0 is not supported"),
        (["--metrics-port=0"], "--metrics-port=0 (give it a port number) is not supported"),
        (["--metrics-on-http-port=true"], "--metrics-on-http-port=true (use --metrics-port)"),
        (["--allow-sagemaker=true"], "--allow-sagemaker=true is not supported"),
        (["--allow-vertex-ai=true"], "--allow-vertex-ai=true is not supported"),
        (["--allow-openai=true"], "--allow-openai=true is not supported (its port is not"),
        (
            ["--metrics-config=summary_latencies=true"],
            "--metrics-config summary_latencies=true (quantiles cannot be summed)",
        ),
    ],
)
def test_flags_refused_at_start(
    repository: Path, tmp_path: Path, flags: list[str], refusal: str
) -> None:
    command = [
        sys.executable,
        "-m",
        "despina",
        "serve",
        f"--model-repository={repository}",
        "--serving-processes",
        "2",
        f"--http-port={free_port()}",
        f"--grpc-port={free_port()}",
        f"--metrics-port={free_port()}",
        *flags,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=STOP_S)
    assert done.returncode == 1
    assert f"--serving-processes 2: {refusal}" in done.stderr
    assert "started 2 serving processes" not in done.stderr


def test_fewer_than_one_serving_process_is_a_usage_error() -> None:
    command = [sys.executable, "-m", "despina", "serve", "--serving-processes=0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=STOP_S)
    assert done.returncode == 2
    assert "--serving-processes: must be 1 or more, got 0" in done.stderr
