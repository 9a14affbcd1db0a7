"""Fixtures of the OpenVINO backend's tests: IR models built with OpenVINO's opset API and
saved with ``openvino.save_model``, ONNX files from ``onnx.helper``, and an HTTP client."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
import tritonclient.http as httpclient
from despina.testing import RunningServer
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


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
    """Builders: ``add_sub`` / ``add_dynamic`` / ``identity`` IR file sets, ``add_sub_onnx`` bytes."""
    scratch = tmp_path / "ir"
    return {
        "add_sub": lambda **kw: add_sub_ir(scratch / "add_sub", **kw),
        "add_dynamic": lambda: add_dynamic_ir(scratch / "add_dynamic"),
        "identity": lambda datatypes: identity_ir(scratch / "identity", datatypes),
        "add_sub_onnx": add_sub_onnx,
        "datatypes": lambda: list(OV_TYPES),
    }


class ServedModels:
    """A model client over HTTP (the real ``tritonclient.http``): infer, config, index, stats."""

    def __init__(self, running: RunningServer) -> None:
        self.running = running
        self.server = running.server
        self.client = httpclient.InferenceServerClient(running.http_url, concurrency=16)

    def close(self) -> None:
        self.client.close()

    def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Outputs of one request; raises InferenceServerException for a failed one."""
        infer_inputs, requested = self._request(inputs, outputs)
        result = self.client.infer(model, infer_inputs, outputs=requested)
        return self._outputs(result)

    def infer_many(self, model: str, requests: Sequence[dict[str, np.ndarray]]) -> list[Any]:
        """Send every request at once; return outputs, or the exception, per request."""
        pending = [self.client.async_infer(model, self._request(r, None)[0]) for r in requests]
        results: list[Any] = []
        for item in pending:
            try:
                results.append(self._outputs(item.get_result()))
            except InferenceServerException as exc:
                results.append(exc)
        return results

    def config(self, model: str) -> dict[str, Any]:
        return dict(self.client.get_model_config(model))

    def index(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.client.get_model_repository_index()}

    def stats(self, model: str) -> dict[str, Any]:
        return dict(self.client.get_inference_statistics(model)["model_stats"][0])

    @staticmethod
    def _request(
        inputs: dict[str, np.ndarray], outputs: Sequence[str] | None
    ) -> tuple[list[Any], list[Any] | None]:
        infer_inputs = []
        for name, array in inputs.items():
            item = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(item)
        requested = (
            None if outputs is None else [httpclient.InferRequestedOutput(n) for n in outputs]
        )
        return infer_inputs, requested

    @staticmethod
    def _outputs(result: Any) -> dict[str, np.ndarray]:
        names = [o["name"] for o in result.get_response()["outputs"]]
        return {name: result.as_numpy(name) for name in names}


@pytest.fixture
def served() -> Iterator[Callable[[RunningServer], ServedModels]]:
    """Factory: ``served(running)`` -> an HTTP client of that server's models."""
    clients: list[ServedModels] = []

    def factory(running: RunningServer) -> ServedModels:
        clients.append(ServedModels(running))
        return clients[-1]

    yield factory
    for client in clients:
        client.close()
