"""The ``despina.testing`` pytest plugin is imported by every pytest run wherever despina is
installed: importing it must not import the server or anything heavy."""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules the plugin imports only in the fixtures and functions that need them.
HEAVY = ("despina.serving.server", "numpy", "google.protobuf", "tritonclient", "grpc", "aiohttp")


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = "import json, sys, despina.testing; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    modules = set(json.loads(result.stdout))
    assert "despina.testing" in modules
    loaded = [m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]
    assert loaded == []
