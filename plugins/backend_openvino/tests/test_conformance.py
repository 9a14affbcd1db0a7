"""The core's backend conformance suite, run against OpenVINO with IR models built by
OpenVINO's opset API (see conftest.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from despina.testing.conformance import BackendConformance, BuiltModel, Files, RejectingModel

from .conftest import add_dynamic_ir, add_sub_ir, identity_ir


def version_files(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``{"1/model.xml": ...}`` -> ``{"model.xml": ...}``."""
    return {name.split("/", 1)[1]: data for name, data in files.items()}


class TestOpenVinoConformance(BackendConformance):
    __test__ = True

    backend = "openvino"
    distribution = "despina-backend-openvino"
    entry_point_module = "despina_backend_openvino.plugin"
    default_model_filename = "model.xml"
    framework_modules = ("openvino",)
    unsupported = {
        "BF16": "the backend maps no OpenVINO element type to BF16 (bf16 is only an "
        "inference precision there, parameter HINT_BF16)",
    }

    def backend_class(self) -> type:
        from despina_backend_openvino.backend import OpenVinoBackend

        return OpenVinoBackend

    def add_sub_files(self, scratch: Path) -> Files:
        return version_files(add_sub_ir(scratch))

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        """OUT_<T> = concat(IN_<T>, IN_<T>) on the last axis (a real op on every type)."""
        files = version_files(identity_ir(scratch, [datatype]))
        return BuiltModel(files, None, (f"IN_{datatype}",), (f"OUT_{datatype}",))

    def identity_expected(self, datatype: str, sent: Any) -> Any:
        if datatype == "FP64":  # OpenVINO's CPU plugin computes f64 as f32
            sent = sent.astype(np.float32).astype(np.float64)
        return np.concatenate([sent, sent], axis=-1)

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        files = self.add_sub_files(scratch)
        return {
            "xml": {"model.xml": b"<net", "model.bin": files["model.bin"]},
            "no_bin": {"model.xml": files["model.xml"]},
            "no_xml": {"model.bin": files["model.bin"]},
        }

    def corrupt_reason(self, model: str, case: str) -> str:
        if case == "no_xml":
            return self.missing_file_reason(model)
        return f"model '{model}': OpenVINO cannot read '1/model.xml'"

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        """OUT = X + Y with shapes [batch, -1]: mismatched lengths fail at run time."""
        ones = np.ones((1, 3), np.float32)
        return RejectingModel(
            files=version_files(add_dynamic_ir(scratch)),
            config='backend: "openvino"\nmax_batch_size: 8\n',
            good={"X": ones, "Y": ones},
            bad={"X": ones, "Y": np.ones((1, 2), np.float32)},
            expected={"OUT": ones * 2},
            errors=("OpenVINO inference failed",),
        )
