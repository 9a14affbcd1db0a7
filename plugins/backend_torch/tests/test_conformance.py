"""The core's backend conformance suite, run against the PyTorch backend with TorchScript
and torch.export models built by the tests (see conftest.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from despina.testing.conformance import (
    CONFIG_CHECK,
    NO_CONFIG,
    BackendConformance,
    BuiltModel,
    Files,
    RejectingModel,
)

from .conftest import AddSub, Identity, Picky, Words, exported, scripted


class TestTorchConformance(BackendConformance):
    __test__ = True

    backend = "pytorch"
    distribution = "despina-backend-torch"
    entry_point_module = "despina_backend_torch.plugin"
    platforms = ("pytorch_libtorch",)
    default_model_filename = "model.pt"
    framework_modules = ("torch",)
    add_sub_inputs = ("INPUT__0", "INPUT__1")
    add_sub_outputs = ("OUTPUT__0", "OUTPUT__1")
    unsupported = {
        NO_CONFIG: "a TorchScript model.pt declares no input/output types or shapes, so its "
        "folder needs a config (torch.export programs are model.pt2, not the default file)",
        CONFIG_CHECK: "TorchScript declares no shapes or types to check a config against; "
        "inputs bind to forward() arguments by name or index (test_errors.py checks that)",
    }

    def backend_class(self) -> type:
        from despina_backend_torch.backend import TorchBackend

        return TorchBackend

    def add_sub_files(self, scratch: Path) -> Files:
        return {"model.pt": scripted(AddSub())}

    def autocomplete_model(self, scratch: Path) -> BuiltModel:
        """A torch.export program: it declares types and shapes, a TorchScript file does not."""
        program = exported(AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_batch=True)
        config = 'backend: "pytorch"\ndefault_model_filename: "model.pt2"\n'
        return BuiltModel({"model.pt2": program}, config, ("a", "b"), self.add_sub_outputs)

    def identity_model(self, scratch: Path, datatype: str) -> BuiltModel:
        if datatype == "BYTES":  # strings reach forward() as a 1-D list[str]
            config = (
                'backend: "pytorch"\n'
                'input [ { name: "words" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
            )
            return BuiltModel({"model.pt": scripted(Words())}, config, ("words",), ("OUTPUT__0",))
        config = (
            'backend: "pytorch"\nmax_batch_size: 4\n'
            f'input [ {{ name: "x" data_type: TYPE_{datatype} dims: [ -1 ] }} ]\n'
            f'output [ {{ name: "OUTPUT__0" data_type: TYPE_{datatype} dims: [ -1 ] }} ]\n'
        )
        return BuiltModel({"model.pt": scripted(Identity())}, config, ("x",), ("OUTPUT__0",))

    def identity_shape(self, datatype: str) -> tuple[int, ...]:
        return (6,) if datatype == "BYTES" else (2, 5)

    def corrupt_models(self, scratch: Path) -> Mapping[str, Files]:
        return {"empty": {"model.pt": b""}, "garbage": {"model.pt": b"PK\x03\x04 not a zip"}}

    def corrupt_reason(self, model: str, case: str) -> str:
        return f"model '{model}': torch cannot load '1/model.pt'"

    def rejecting_model(self, scratch: Path) -> RejectingModel:
        """Doubles x; forward() raises for negative values."""
        config = (
            'backend: "pytorch"\nmax_batch_size: 8\n'
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        )
        ones = np.ones((1, 4), np.float32)
        return RejectingModel(
            files={"model.pt": scripted(Picky())},
            config=config,
            good={"x": ones},
            bad={"x": -ones},
            expected={"OUTPUT__0": ones * 2},
            errors=("PyTorch execute failure", "negative values are not allowed"),
        )
