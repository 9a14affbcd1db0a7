"""Stopping while tritonclient gRPC clients call back to back, calls in flight and new ones
arriving: each call gets its response or a status (the server is stopping: the port keeps
accepting while the models stop, as Triton's), or finds the port closed once the models
are unloaded; none is cut by a reset connection. (Calls refused with REFUSED_STREAM after
the last GOAWAY are retried by the client itself, then find the port closed.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
from despina.testing import RunningServer
from outcomes import Outcomes

CLIENTS = 6
#: Calls one client makes at most (the loop is bounded; the stop ends it far sooner).
MAX_CALLS = 5000
#: Answers before the stop: every client is calling.
WARM_UP = 20 * CLIENTS
#: What a call cut by its connection says (as bench/reliability.py counts it lost).
CUT = ("Stream removed", "Connection reset", "Broken pipe", "Socket closed", "GOAWAY")
#: What a call that found the port closed says.
REFUSED = ("failed to connect to all addresses", "Connection refused")


class Callers(Outcomes):
    """Clients calling back to back (half on the sleeping model, so calls are in flight
    as the stop begins) until the port is closed; tallies how each call ended."""

    def __init__(self, running: RunningServer) -> None:
        super().__init__()
        self.running = running

    def client(self, index: int) -> None:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        sleeping = index % 2 == 1
        with grpcclient.InferenceServerClient(self.running.grpc_url) as client:
            for number in range(MAX_CALLS):
                if sleeping:  # 20 ms each
                    inputs = [grpcclient.InferInput("IN", [1], "FP32")]
                    inputs[0].set_data_from_numpy(np.array([0.2], np.float32))
                else:
                    value = np.full((1, 16), float(number), np.float32)
                    inputs = [grpcclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in (0, 1)]
                    inputs[0].set_data_from_numpy(value)
                    inputs[1].set_data_from_numpy(np.ones_like(value))
                model = "sleep" if sleeping else "add_sub"
                try:
                    result = client.infer(model, inputs, client_timeout=30)
                except InferenceServerException as exc:
                    if self.failed(index, str(exc.status()), exc.message() or ""):
                        return
                    continue
                output = result.as_numpy("OUT" if sleeping else "OUTPUT0")
                expected = [0.2] if sleeping else (value + 1).reshape(-1).tolist()
                right = np.allclose(output.reshape(-1), expected)
                self.note("ok" if right else "wrong", "" if right else f"{output}")

    def failed(self, index: int, status: str, text: str) -> bool:
        """Tally a failed call; whether the client is done (the port closed)."""
        # first: a connect that failed sent nothing, even when it failed by a reset (a
        # handshake that raced the listener's close)
        if status == "StatusCode.UNAVAILABLE" and any(s in text for s in REFUSED):
            self.note("refused")
            return True
        if any(s in text for s in CUT):
            self.note("cut", f"client {index}: {status}: {text}")
            return True
        if status == "StatusCode.UNAVAILABLE" and text.startswith("Server is stopping"):
            self.note("stopping")
            return False
        self.note("unexpected", f"client {index}: {status}: {text}")
        return True


def test_clients_calling_while_the_server_stops_lose_no_call(
    serve: Callable[..., RunningServer],
) -> None:
    running = serve()
    callers = Callers(running)
    threads = [threading.Thread(target=callers.client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while callers.answered() < WARM_UP:
        assert time.monotonic() < deadline, f"load did not start: {callers.outcomes}"
        assert all(t.is_alive() for t in threads), callers.problems
        time.sleep(0.02)
    running.stop()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    print("gRPC clients at stop:", dict(callers.outcomes))
    assert not callers.problems
    assert set(callers.outcomes) <= {"ok", "stopping", "refused"}
    assert callers.outcomes["refused"] == CLIENTS  # each ended on the closed port
    assert callers.outcomes["ok"] >= WARM_UP
