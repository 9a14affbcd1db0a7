"""Every TensorRT name the backend calls exists, with the parameters it passes, in the
published bindings wheels (tensorrt-cu12-bindings 10.13.3.9.post1 and 11.4.0.106, read
by tensorrt_api.py into data/tensorrt_api.json), and the stand-in has the same names and
parameter names, so what the serving tests drive is the real API's shape."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
SRC = HERE.parent / "src" / "despina_backend_trt"
RECORDS = json.loads((HERE / "data" / "tensorrt_api.json").read_text())["versions"]
_spec = importlib.util.spec_from_file_location("despina_trt_api", HERE / "tensorrt_api.py")
assert _spec is not None and _spec.loader is not None
api: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api)


@pytest.mark.parametrize("version", sorted(RECORDS))
def test_every_used_name_is_in_the_published_bindings(version: str) -> None:
    record = RECORDS[version]
    assert set(record) == set(api.USED)
    absent = [name for name, entry in record.items() if not entry["present"]]
    assert absent == []
    for name, params in api.USED.items():
        documented = record[name]["params"]
        if params is not None and documented is not None:
            assert documented == params, name


def test_the_backend_calls_only_recorded_names() -> None:
    """Attributes the backend's sources take of ``trt`` or of engines/contexts are used
    names (a static check: a call on a name outside USED fails here)."""
    members = {n.rpartition(".")[2] for n in api.USED}
    trt_api_like = ("get_tensor", "set_", "execute", "create_execution", "num_", "is_shape",
                    "deserialize", "reallocate", "notify_shape")  # fmt: skip
    for path in SRC.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                base = node.value
                if isinstance(base, ast.Name) and base.id == "trt":
                    assert node.attr in members, f"{path.name}: trt.{node.attr}"
                elif node.attr.startswith(trt_api_like) and node.attr not in members:
                    assert not isinstance(base, ast.Name) or base.id not in ("engine", "context"), (
                        f"{path.name}: {base.id}.{node.attr}"
                    )


def test_the_stand_in_has_the_real_parameter_names() -> None:
    from despina_trt_standin import ICudaEngine, IExecutionContext, ILogger, Runtime

    classes = {
        "Runtime": Runtime,
        "ICudaEngine": ICudaEngine,
        "IExecutionContext": IExecutionContext,
        "ILogger": ILogger,
    }
    for version, record in RECORDS.items():
        for name, entry in record.items():
            owner, _, member = name.rpartition(".")
            if owner not in classes or entry["params"] is None:
                continue
            params = list(inspect.signature(getattr(classes[owner], member)).parameters)[1:]
            assert params[: len(entry["params"])] == entry["params"], (version, name)


def test_an_installed_bindings_wheel_agrees_with_the_record() -> None:
    spec = importlib.util.find_spec("tensorrt_bindings")
    if spec is None or not spec.submodule_search_locations or shutil.which("readelf") is None:
        pytest.skip(
            "no tensorrt_bindings wheel (or no readelf) installed: checked against the recorded wheels only"
        )
    so = next(Path(next(iter(spec.submodule_search_locations))).glob("tensorrt*.so"))
    found = api.record(so)
    assert [n for n, e in found.items() if not e["present"]] == []
