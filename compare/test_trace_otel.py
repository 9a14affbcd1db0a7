"""OpenTelemetry spans of Despina and Triton 2.51 for the same requests: the same trees.

Both servers export with ``--trace-config mode=opentelemetry`` (OTLP/HTTP) to a receiver
of their own that decodes with ``opentelemetry-proto``, and answer the same tritonclient
requests, each carrying a W3C ``traceparent``: add_sub over HTTP and gRPC, and the
``twice`` ensemble over HTTP. Ids and times differ by nature; what is compared is each
request's span tree: span names, kinds, attribute keys (and the values that do not
depend on the run), event names (the core's in order, the protocol's as a set), the
parent of every span, and that every span continues the client's trace.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder

from .conftest import TRITONSERVER, Served, _start, _wait_loaded
from .models import build

pytest.importorskip("opentelemetry.proto")
from otlp_receiver import Receiver, attributes

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLS = (("http", "add_sub", "b7ad6b7169203331"), ("grpc", "add_sub", "b7ad6b7169203332"))
CALLS += (("http", "twice", "b7ad6b7169203333"),)
#: Attributes whose values change from run to run (only their presence is compared).
RUN_DEPENDENT = {"triton.trace_id", "triton.trace_parent_id"}


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Any]]]:
    """Each server's exported spans for the same requests (flushed at shutdown)."""
    if shutil.which(TRITONSERVER) is None:
        pytest.skip(f"no tritonserver at {TRITONSERVER} (set TRITONSERVER)")
    root = tmp_path_factory.mktemp("otel_compare")
    repo = RepositoryBuilder(root / "repo")
    build(repo, "in-process")
    commands = {"despina": [sys.executable, "-m", "despina", "serve"], "triton": [TRITONSERVER]}
    exported: dict[str, list[Any]] = {}
    for name, command in commands.items():
        receiver = Receiver()
        flags = [
            "--trace-config=mode=opentelemetry",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
            f"--trace-config=opentelemetry,url={receiver.url}",
            "--trace-config=opentelemetry,resource=service.name=compare",
        ]
        log = root / f"{name}.log"
        served = _start(name, [*command, *flags], repo.root, log)
        try:
            _wait_loaded(served, log, len(list(repo.root.iterdir())))
            _ask(served)
        finally:
            served.stop()
            receiver.close()
        exported[name] = [span for _, span in receiver.spans]
    yield exported


def _ask(served: Served) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    data = np.arange(4, dtype=np.float32)
    for protocol, model, parent in CALLS:
        module: Any = httpclient if protocol == "http" else grpcclient
        client = module.InferenceServerClient(
            served.http_url if protocol == "http" else served.grpc_url
        )
        tensors = []
        for name in ("INPUT0", "INPUT1"):
            tensor = module.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
        traceparent = {"traceparent": f"00-{TRACE_ID}-{parent}-01"}
        client.infer(model, tensors, request_id="cmp", headers=traceparent)
        client.close()


def _tree(span: Any, children: dict[bytes, list[Any]]) -> dict[str, Any]:
    """A span and its descendants without run-dependent parts."""
    values = attributes(span)
    events = [e.name for e in span.events]
    return {
        "name": span.name,
        "kind": span.kind,
        "attributes": {k: (None if k in RUN_DEPENDENT else v) for k, v in values.items()},
        "core_events": [e for e in events if not e.startswith(("HTTP_", "GRPC_"))],
        "protocol_events": sorted(e for e in events if e.startswith(("HTTP_", "GRPC_"))),
        "children": sorted(
            (_tree(child, children) for child in children.get(span.span_id, [])),
            key=lambda tree: (tree["name"], str(tree)),
        ),
    }


def _trees(spans: list[Any]) -> dict[str, dict[str, Any]]:
    """Each request's span tree, by the client's parent span id it continues."""
    children: dict[bytes, list[Any]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    return {
        parent: _tree(root, children)
        for _, _, parent in CALLS
        for root in children.get(bytes.fromhex(parent), [])
    }


def test_every_span_continues_the_clients_trace(spans: dict[str, list[Any]]) -> None:
    for name, exported in spans.items():
        assert exported, f"{name} exported no span"
        assert {span.trace_id for span in exported} == {bytes.fromhex(TRACE_ID)}, name


def test_span_trees_are_tritons(spans: dict[str, list[Any]]) -> None:
    despina, triton = _trees(spans["despina"]), _trees(spans["triton"])
    assert set(triton) == {parent for _, _, parent in CALLS}
    for _, model, parent in CALLS:
        assert despina.get(parent) == triton[parent], model
