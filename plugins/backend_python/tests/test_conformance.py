"""The core's backend conformance suite, run against the Python backend in both execution
modes with model.py files the tests write (see models.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from despina.testing.conformance import (
    CONFIG_CHECK,
    DEFAULT_MAX_BATCH_SIZE,
    BackendConformance,
    BuiltModel,
    Files,
    RejectingModel,
)

from .models import ADD_SUB_ANY_BATCH, IDENTITY, MODE_KEY, PICKY


class PythonConformance(BackendConformance):
    """The Python backend's answers to the suite; the subclasses pick the execution mode."""

    mode = "process"
    backend = "python"
    distribution = "despina-backend-python"
    entry_point_module = "despina_backend_python.plugin"
    default_model_filename = "model.py"
    framework_modules = ("numpy", "google.protobuf")
    unsupported = {
        DEFAULT_MAX_BATCH_SIZE: "max_batch_size comes from model.py's auto_complete_config "
        "(set_max_batch_size); the backend does not read default-max-batch-size",
        CONFIG_CHECK: "a model.py declares no tensors to check a config against",
    }

    def backend_class(self) -> type:
        from despina_backend_python.server.backend import PythonBackend

        return PythonBackend

    def mode_parameter(self) -> str:
        return f'parameters {{ key: "{MODE_KEY}" value {{ string_value: "{self.mode}" }} }}\n'

    def config_header(self) -> str:
        return f'backend: "python"\n{self.mode_parameter()}'

    def add_sub_files(self, scratch: Path) -> Files:
        return {"model.py": ADD_SUB_ANY_BATCH}

    def autocomplete_model(self, scratch: Path) -> BuiltModel:
        """model.py's auto_complete_config fills a config naming only the execution mode."""
        return BuiltModel(
            self.add_sub_files(scratch),
            self.mode_parameter(),
            self.add_sub_inputs,
            self.add_sub_outputs,
        )

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        config_type = "STRING" if datatype == "BYTES" else datatype
        config = (
            f"{self.config_header()}max_batch_size: 4\n"
            f'input [ {{ name: "IN" data_type: TYPE_{config_type} dims: [ -1 ] }} ]\n'
            f'output [ {{ name: "OUT" data_type: TYPE_{config_type} dims: [ -1 ] }} ]\n'
        )
        return BuiltModel({"model.py": IDENTITY}, config, ("IN",), ("OUT",))

    def missing_file_reason(self, model: str) -> str:
        return "Python model file not found"

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        return {"syntax": {"model.py": "def oops(:\n"}, "no_class": {"model.py": "x = 1\n"}}

    def corrupt_reason(self, model: str, case: str) -> str:
        if case == "syntax":
            return "Internal: SyntaxError: invalid syntax (model.py, line 1)"
        return "has no attribute 'TritonPythonModel'"

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        config = (
            f"{self.config_header()}max_batch_size: 8\n"
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        )
        ones = np.ones((1, 4), np.float32)
        return RejectingModel(
            files={"model.py": PICKY},
            config=config,
            good={"X": ones},
            bad={"X": -ones},
            expected={"Y": ones * 2},
            errors=("negative values are not allowed",),
        )


class TestPythonProcessConformance(PythonConformance):
    __test__ = True
    mode = "process"


class TestPythonInProcessConformance(PythonConformance):
    __test__ = True
    mode = "in-process"
