"""Fixtures of the ONNX Runtime backend's tests: ONNX models built with ``onnx.helper``
and a served-model client."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from onnx import TensorProto, helper

OPSET = [helper.make_opsetid("", 17)]

#: Triton datatype -> ONNX element type, for every type onnxruntime exchanges with numpy.
ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any]) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return bytes(helper.make_model(graph, opset_imports=OPSET).SerializeToString())


def add_sub_model(batch: str | int = "batch", width: int = 4) -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [batch, width]."""
    shape = [batch, width]
    io = helper.make_tensor_value_info
    return _model(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [io("INPUT0", TensorProto.FLOAT, shape), io("INPUT1", TensorProto.FLOAT, shape)],
        [io("OUTPUT0", TensorProto.FLOAT, shape), io("OUTPUT1", TensorProto.FLOAT, shape)],
    )


def gather_model() -> bytes:
    """OUT = GatherElements(DATA [batch,4] FP32, INDEX [batch,2] INT64, axis=1): an
    out-of-range index is an error onnxruntime raises at run time."""
    io = helper.make_tensor_value_info
    return _model(
        [helper.make_node("GatherElements", ["DATA", "INDEX"], ["OUT"], axis=1)],
        [io("DATA", TensorProto.FLOAT, ["b", 4]), io("INDEX", TensorProto.INT64, ["b", 2])],
        [io("OUT", TensorProto.FLOAT, ["b", 2])],
    )


def identity_model(datatypes: Sequence[str]) -> bytes:
    """OUT_<T> = IN_<T> for each datatype, shape [batch, -1]."""
    io = helper.make_tensor_value_info
    return _model(
        [helper.make_node("Identity", [f"IN_{t}"], [f"OUT_{t}"]) for t in datatypes],
        [io(f"IN_{t}", ONNX_TYPES[t], ["b", "n"]) for t in datatypes],
        [io(f"OUT_{t}", ONNX_TYPES[t], ["b", "n"]) for t in datatypes],
    )


@pytest.fixture
def onnx_models() -> dict[str, Callable[..., bytes]]:
    """The model builders: ``add_sub``, ``gather``, ``identity``."""
    return {"add_sub": add_sub_model, "gather": gather_model, "identity": identity_model}


@pytest.fixture
def onnx_datatypes() -> list[str]:
    """Every Triton datatype the onnxruntime backend serves, but BF16 (served apart: a model
    may not mix BF16 with strings)."""
    return [t for t in ONNX_TYPES if t != "BF16"]
