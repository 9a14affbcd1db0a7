"""The core's backend conformance suite, run against onnxruntime with models built by
``onnx.helper`` (see conftest.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from despina.testing.conformance import BackendConformance, BuiltModel, Files, RejectingModel

from .conftest import add_sub_model, gather_model, identity_model


class TestOnnxConformance(BackendConformance):
    __test__ = True

    backend = "onnxruntime"
    distribution = "despina-backend-onnx"
    entry_point_module = "despina_backend_onnx.plugin"
    platforms = ("onnxruntime_onnx",)
    default_model_filename = "model.onnx"
    framework_modules = ("onnxruntime",)

    def backend_class(self) -> type:
        from despina_backend_onnx.backend import OnnxBackend

        return OnnxBackend

    def add_sub_files(self, scratch: Path) -> Files:
        return {"model.onnx": add_sub_model()}

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        files = {"model.onnx": identity_model([datatype])}
        return BuiltModel(files, None, (f"IN_{datatype}",), (f"OUT_{datatype}",))

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        return {"empty": {"model.onnx": b""}, "garbage": {"model.onnx": b"not an onnx graph"}}

    def corrupt_reason(self, model: str, case: str) -> str:
        return f"model '{model}': onnxruntime cannot load '1/model.onnx'"

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        """GatherElements: an index out of range is an error onnxruntime raises at run time."""
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        return RejectingModel(
            files={"model.onnx": gather_model()},
            config='backend: "onnxruntime"\nmax_batch_size: 8\n',
            good={"DATA": data, "INDEX": np.array([[0, 3], [1, 2]], np.int64)},
            bad={"DATA": data, "INDEX": np.array([[0, 9], [1, 2]], np.int64)},
            expected={"OUT": np.array([[0.0, 3.0], [5.0, 6.0]], np.float32)},
            errors=("onnx runtime error", "Out of range value in index tensor"),
        )
