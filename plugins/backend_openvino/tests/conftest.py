"""Fixtures of the OpenVINO backend's tests: IR models built with OpenVINO's opset API and
saved with ``openvino.save_model``, ONNX files from ``onnx.helper``, and an HTTP client."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from onnx import TensorProto, helper


def _named(node: Any, name: str) -> Any:
    node.output(0).get_tensor().set_names({name})
    return node


def add_sub_ir(tmp: Path, batch: int = -1, width: int = 4) -> dict[str, bytes]:
    """IR files (``1/model.xml`` + ``1/model.bin``): OUTPUT0 = INPUT0 + INPUT1,
    OUTPUT1 = INPUT0 - INPUT1, FP32 [batch, width]; a constant makes the .bin non-empty."""
    a = ops.parameter(ov.PartialShape([batch, width]), ov.Type.f32, name="INPUT0")
    b = ops.parameter(ov.PartialShape([batch, width]), ov.Type.f32, name="INPUT1")
    zero = ops.constant(np.zeros(width, np.float32))
    total = _named(ops.add(ops.add(a, b), zero), "OUTPUT0")
    difference = _named(ops.subtract(a, b), "OUTPUT1")
    return _save(ov.Model([total, difference], [a, b], "add_sub"), tmp)


def add_dynamic_ir(tmp: Path) -> dict[str, bytes]:
    """OUT = X + Y with shapes [batch, -1] each: mismatched lengths fail at run time."""
    x = ops.parameter(ov.PartialShape([-1, -1]), ov.Type.f32, name="X")
    y = ops.parameter(ov.PartialShape([-1, -1]), ov.Type.f32, name="Y")
    return _save(ov.Model([_named(ops.add(x, y), "OUT")], [x, y], "add"), tmp)


def _save(model: Any, tmp: Path) -> dict[str, bytes]:
    tmp.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(tmp / "model.xml"))
    return {f"1/{n}": (tmp / n).read_bytes() for n in ("model.xml", "model.bin")}


def add_sub_onnx() -> bytes:
    """The same add/sub graph as an ONNX file."""
    io = helper.make_tensor_value_info
    shape = ["batch", 4]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "g",
        [io("INPUT0", TensorProto.FLOAT, shape), io("INPUT1", TensorProto.FLOAT, shape)],
        [io("OUTPUT0", TensorProto.FLOAT, shape), io("OUTPUT1", TensorProto.FLOAT, shape)],
    )
    return bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )


def identity_ir(tmp: Path, datatypes: Sequence[str]) -> dict[str, bytes]:
    """OUT_<T> = IN_<T> (via Concat with itself along the last axis) per datatype."""
    params, results = [], []
    for datatype in datatypes:
        param = ops.parameter(ov.PartialShape([-1, -1]), OV_TYPES[datatype], name=f"IN_{datatype}")
        params.append(param)
        results.append(_named(ops.concat([param, param], -1), f"OUT_{datatype}"))
    return _save(ov.Model(results, params, "identity"), tmp)


OV_TYPES = {
    "BOOL": ov.Type.boolean,
    "UINT8": ov.Type.u8,
    "UINT16": ov.Type.u16,
    "UINT32": ov.Type.u32,
    "UINT64": ov.Type.u64,
    "INT8": ov.Type.i8,
    "INT16": ov.Type.i16,
    "INT32": ov.Type.i32,
    "INT64": ov.Type.i64,
    "FP16": ov.Type.f16,
    "FP32": ov.Type.f32,
    "FP64": ov.Type.f64,
    "BYTES": ov.Type.string,
}


@pytest.fixture
def ov_models(tmp_path: Path) -> dict[str, Callable[..., Any]]:
    """Builders: ``add_sub`` / ``add_dynamic`` IR file sets, ``add_sub_onnx`` bytes. The
    conformance suite (test_conformance.py) calls the module's functions directly."""
    scratch = tmp_path / "ir"
    return {
        "add_sub": lambda **kw: add_sub_ir(scratch / "add_sub", **kw),
        "add_dynamic": lambda: add_dynamic_ir(scratch / "add_dynamic"),
        "add_sub_onnx": add_sub_onnx,
    }
