"""``despina.testing.conformance``, the suite every backend plugin runs, is cheap to import and is
not collected itself (only backends' ``Test*`` subclasses are)."""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules the suite imports only inside the checks that need them.
HEAVY = (
    "despina.serving.server",
    "numpy",
    "google.protobuf",
    "tritonclient",
    "grpc",
    "onnx",
    "torch",
)


def test_importing_the_suite_imports_nothing_heavy() -> None:
    code = "import json, sys, despina.testing.conformance; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    modules = set(json.loads(result.stdout))
    assert "despina.testing.conformance" in modules
    loaded = [m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]
    assert loaded == []


def test_the_base_class_is_not_collected_and_its_subclasses_opt_in() -> None:
    from despina.testing.conformance import DATATYPES, FEATURES, BackendConformance

    assert BackendConformance.__test__ is False
    checks = [name for name in dir(BackendConformance) if name.startswith("test_")]
    assert len(checks) >= 15
    assert len(set(DATATYPES)) == 14 and not set(FEATURES) & set(DATATYPES)


def test_a_collected_subclass_without_its_hooks_fails_at_import() -> None:
    import pytest
    from despina.testing.conformance import BackendConformance

    with pytest.raises(TypeError, match=r"TestHalfDone lacks distribution, .*add_sub_files\(\)"):

        class TestHalfDone(BackendConformance):
            __test__ = True
            backend = "half"
            entry_point_module = "half.plugin"
            default_model_filename = "model.half"

            def backend_class(self) -> type:
                return object

    class Intermediate(BackendConformance):  # not collected: not checked
        pass

    assert Intermediate.__test__ is False
