"""Trace files of Despina and Triton 2.51 for the same requests: the same structure.

Both servers serve the comparison repository with ``--trace-config triton,file=...``,
level TIMESTAMPS (and TENSORS), rate 1, and answer the same tritonclient requests over
HTTP and gRPC (add_sub, and the ``twice`` ensemble over HTTP). Timestamps differ by
nature, so what is compared is each trace's keys, model entry, timestamp names, the order
of the request's own timestamps (REQUEST_START .. REQUEST_END) and of the protocol's,
the tensor entries, and the ids: one per request, an ensemble step naming its ensemble's
id as ``parent_id``. Triton writes a trace's entries in the order its threads report
them, which varies between runs; Despina writes them in time order.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder

from .conftest import TRITONSERVER, Served, _start, _wait_loaded
from .models import build

REQUEST_ORDER = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
PROTOCOL = ("HTTP_", "GRPC_", "INFER_RESPONSE_COMPLETE")


@pytest.fixture(scope="module")
def trace_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Both servers with tracing on, asked the same requests, then stopped (the files are
    written at shutdown); each server's trace file."""
    if shutil.which(TRITONSERVER) is None:
        pytest.skip(f"no tritonserver at {TRITONSERVER} (set TRITONSERVER)")
    root = tmp_path_factory.mktemp("trace_compare")
    repo = RepositoryBuilder(root / "repo")
    build(repo, "in-process")
    files = {name: root / f"{name}.json" for name in ("despina", "triton")}
    commands = {
        "despina": [sys.executable, "-m", "despina", "serve"],
        "triton": [TRITONSERVER],
    }
    servers: list[Served] = []
    try:
        for name, command in commands.items():
            flags = [
                f"--trace-config=triton,file={files[name]}",
                "--trace-config=level=TIMESTAMPS",
                "--trace-config=level=TENSORS",
                "--trace-config=rate=1",
            ]
            served = _start(name, [*command, *flags], repo.root, root / f"{name}.log")
            servers.append(served)
            _wait_loaded(served, root / f"{name}.log", len(list(repo.root.iterdir())))
            _ask(served)
    finally:
        for served in servers:
            served.stop()
    yield files


def _ask(served: Served) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    data = np.arange(4, dtype=np.float32)
    for module, url, model in (
        (httpclient, served.http_url, "add_sub"),
        (grpcclient, served.grpc_url, "add_sub"),
        (httpclient, served.http_url, "twice"),
    ):
        client: Any = module.InferenceServerClient(url)
        tensors = []
        for name in ("INPUT0", "INPUT1"):
            tensor = module.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
        client.infer(model, tensors, request_id="cmp")
        client.close()


def _traces(path: Path) -> list[dict[str, Any]]:
    """Each trace in the order of its first entry, with what is comparable of it."""
    traces: dict[int, dict[str, Any]] = {}
    for entry in json.loads(path.read_text()):
        trace = traces.setdefault(
            entry["id"], {"model": None, "names": [], "tensors": [], "keys": set()}
        )
        trace["keys"].add(tuple(sorted(entry)))
        if "model_name" in entry:
            trace["model"] = entry
        elif "timestamps" in entry:
            trace["names"] += [t["name"] for t in entry["timestamps"]]
        else:
            tensor = entry["tensor"]
            trace["tensors"].append((entry["activity"], tuple(sorted(tensor.items()))))
    return list(traces.values())


def _shape(trace: dict[str, Any], ids: dict[int, int]) -> dict[str, Any]:
    """A trace without run-dependent parts: ids renumbered by first appearance."""
    model = dict(trace["model"])
    model["id"] = ids[model["id"]]
    if "parent_id" in model:
        model["parent_id"] = ids[model["parent_id"]]
    names = trace["names"]
    return {
        "model": model,
        "keys": trace["keys"],
        "names": sorted(names),
        "request_order": [n for n in names if n in REQUEST_ORDER],
        "protocol_order": [n for n in names if n.startswith(PROTOCOL[:2])],
        "tensors": sorted(trace["tensors"]),
    }


def _summary(path: Path) -> list[dict[str, Any]]:
    traces = _traces(path)
    # number the ids by model entry, parents first, so both files name them alike
    ordered = sorted(traces, key=lambda t: (t["model"].get("parent_id", 0) != 0, t["model"]["id"]))
    ids = {t["model"]["id"]: index for index, t in enumerate(ordered, 1)}
    return sorted(
        (_shape(t, ids) for t in traces),
        key=lambda s: (s["model"]["model_name"], s["model"]["id"]),
    )


def test_trace_files_have_tritons_structure(trace_files: dict[str, Path]) -> None:
    despina, triton = (_summary(trace_files[name]) for name in ("despina", "triton"))
    assert len(despina) == len(triton) == 5
    steps = [
        {k: v for k, v in s.items() if k != "model"} | {"parent": "parent_id" in s["model"]}
        for s in despina
    ]
    expected = [
        {k: v for k, v in s.items() if k != "model"} | {"parent": "parent_id" in s["model"]}
        for s in triton
    ]
    assert steps == expected
    for mine, theirs in zip(despina, triton, strict=True):
        assert set(mine["model"]) == set(theirs["model"])
        assert mine["model"]["model_name"] == theirs["model"]["model_name"]
        assert mine["model"]["model_version"] == theirs["model"]["model_version"]
        assert mine["model"].get("request_id") == theirs["model"].get("request_id")


def test_ensemble_steps_name_their_parent(trace_files: dict[str, Path]) -> None:
    for name in ("despina", "triton"):
        traces = _traces(trace_files[name])
        ensemble = next(t["model"] for t in traces if t["model"]["model_name"] == "twice")
        parents = [t["model"].get("parent_id") for t in traces if t["model"].get("parent_id")]
        assert parents == [ensemble["id"], ensemble["id"]], name
        ids = [t["model"]["id"] for t in traces]
        assert len(set(ids)) == len(ids) == 5, name
