"""The core's backend conformance suite, run against the TensorRT backend with the numpy
stand-in runtime and one simulated GPU (TEST-ONLY, see conftest.py): the backend code is
the production code; the engines are stand-in plans."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RunningServer
from despina.testing.conformance import (
    DEFAULT_MAX_BATCH_SIZE,
    BackendConformance,
    BuiltModel,
    Files,
    RejectingModel,
)
from despina_trt_standin import SimulatedGpu, add_sub_plan, identity_plan

#: Triton datatypes -> TensorRT's (those Triton's tensorrt backend exchanges).
TRT_TYPES = {"BOOL": "BOOL", "UINT8": "UINT8", "INT8": "INT8", "INT32": "INT32",
             "INT64": "INT64", "FP16": "HALF", "FP32": "FLOAT", "BF16": "BF16"}  # fmt: skip
_NO_TYPE = "TensorRT has no {} tensors (Triton's tensorrt backend refuses them)"


class TestTensorRTConformance(BackendConformance):
    __test__ = True

    backend = "tensorrt"
    distribution = "despina-backend-trt"
    entry_point_module = "despina_backend_trt.plugin"
    platforms = ("tensorrt_plan",)
    default_model_filename = "model.plan"
    framework_modules = ("tensorrt", "cupy")
    instance_kind = "KIND_GPU"  # TensorRT serves GPU instances only
    unsupported = {
        DEFAULT_MAX_BATCH_SIZE: (
            "max_batch_size comes from the engine's optimization profiles, as in Triton"
        ),
        **{
            datatype: _NO_TYPE.format(datatype)
            for datatype in ("UINT16", "UINT32", "UINT64", "INT16", "FP64", "BYTES")
        },
    }

    @pytest.fixture(autouse=True)
    def _standin(self, trt_standin: Any) -> Iterator[Any]:
        yield trt_standin

    @pytest.fixture
    def despina_server(
        self, despina_server: Callable[..., RunningServer]
    ) -> Callable[..., RunningServer]:
        """The suite's servers, with the simulated GPU the instances run on."""

        def start(root: Path, args: Sequence[str] = (), **kwargs: Any) -> RunningServer:
            return despina_server(root, list(args), plugins=[SimulatedGpu()])

        return start

    def backend_class(self) -> type:
        from despina_backend_trt.backend import TensorRTBackend

        return TensorRTBackend

    def add_sub_files(self, scratch: Path) -> Files:
        return {"model.plan": add_sub_plan()}

    def autocomplete_model(self, scratch: Path) -> BuiltModel:
        """The engine's profile allows batches of 1 to 4: auto-complete says max batch 4."""
        files = {"model.plan": add_sub_plan([(1, 2, 4)])}
        return BuiltModel(files, None, self.add_sub_inputs, self.add_sub_outputs)

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        trt_type = TRT_TYPES[datatype]
        files = {"model.plan": identity_plan(trt_type)}
        config = f'backend: "tensorrt"\nmax_batch_size: 0\ninput [ {{ name: "IN_{trt_type}" dims: [ -1, -1 ] }} ]\n'
        return BuiltModel(files, config, (f"IN_{trt_type}",), (f"OUT_{trt_type}",))

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        return {"empty": {"model.plan": b""}, "garbage": {"model.plan": b"not a plan"}}

    def corrupt_reason(self, model: str, case: str) -> str:
        return f"model '{model}': unable to create TensorRT engine from '1/model.plan'"

    def mismatch_reasons(self, model: str, case: str) -> list[str]:
        """Triton's tensorrt backend texts (instance_state.cc ValidateIO)."""
        where = f"input 'INPUT0' for model '{model}'"
        return {
            "dims": [f"{where}: model configuration specifies dims [-1,5]", "[-1,4]"],
            "rank": [f"{where}: model configuration specifies dims [-1,2,2]", "[-1,4]"],
            "data_type": [f"unsupported datatype TYPE_FP64 for {where}"],
            "unknown_input": ["unexpected inference input 'IMAGE', allowed inputs are: INPUT0"],
            "missing_input": [f"expected configuration for input 'INPUT1' for {model}"],
            "unknown_output": ["unexpected inference output 'SCORES', allowed outputs are"],
        }[case]

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        """Rows of 1 to 4 values: TensorRT refuses a wider input's shape at run time
        (``set_input_shape`` outside the optimization profile)."""
        good = np.arange(4, dtype=np.float32).reshape(1, 4)
        bad = np.ones((1, 6), np.float32)
        return RejectingModel(
            files={"model.plan": add_sub_plan(width=-1)},
            config=(
                'backend: "tensorrt"\nmax_batch_size: 8\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },\n'
                '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },\n'
                '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            ),
            good={"INPUT0": good, "INPUT1": good},
            bad={"INPUT0": bad, "INPUT1": bad},
            expected={"OUTPUT0": good + good, "OUTPUT1": good - good},
            errors=("input 'INPUT", "is outside optimization profile 0[0]"),
        )
