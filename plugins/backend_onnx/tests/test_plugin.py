"""The plugin is found through its entry point and importing it does not import onnxruntime."""

from __future__ import annotations

import subprocess
import sys

from despina.plugins import create_plugins
from despina_backend_onnx.backend import OnnxBackend


def test_discovered_through_entry_point() -> None:
    plugins = create_plugins()
    backends = plugins.capabilities("despina_backends")
    cls, origin = backends["onnxruntime"]
    assert cls is OnnxBackend
    assert origin.distribution == "despina-backend-onnx"
    assert cls.platforms == ("onnxruntime_onnx",)
    assert cls.default_model_filename == "model.onnx"


def test_entry_point_module_does_not_import_onnxruntime() -> None:
    code = (
        "import sys, despina_backend_onnx.plugin; "
        "assert 'onnxruntime' not in sys.modules, 'onnxruntime imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
