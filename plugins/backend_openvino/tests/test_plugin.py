"""The plugin is found through its entry point and importing it does not import openvino."""

from __future__ import annotations

import subprocess
import sys

from despina.plugins import create_plugins
from despina_backend_openvino.backend import OpenVinoBackend


def test_discovered_through_entry_point() -> None:
    cls, origin = create_plugins().capabilities("despina_backends")["openvino"]
    assert cls is OpenVinoBackend
    assert origin.distribution == "despina-backend-openvino"
    assert cls.default_model_filename == "model.xml"


def test_entry_point_module_does_not_import_openvino() -> None:
    code = "import sys, despina_backend_openvino.plugin; assert 'openvino' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
