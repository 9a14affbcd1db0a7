"""The plugin is found through its entry point and importing it does not import torch."""

from __future__ import annotations

import subprocess
import sys

from despina.plugins import create_plugins
from despina_backend_torch.backend import TorchBackend


def test_discovered_through_entry_point() -> None:
    cls, origin = create_plugins().capabilities("despina_backends")["pytorch"]
    assert cls is TorchBackend
    assert origin.distribution == "despina-backend-torch"
    assert cls.platforms == ("pytorch_libtorch",)
    assert cls.default_model_filename == "model.pt"


def test_entry_point_module_does_not_import_torch() -> None:
    code = "import sys, despina_backend_torch.plugin; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
