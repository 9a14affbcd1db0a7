"""The backend is discovered through its entry point, and pb_utils imports as in Triton."""

from __future__ import annotations

from importlib.metadata import entry_points

from despina.plugins import create_plugins


def test_discovered_through_entry_point() -> None:
    names = [
        ep.name
        for ep in entry_points(group="despina")
        if ep.value.startswith("despina_backend_python")
    ]
    assert names == ["python"]
    backends = create_plugins().capabilities("despina_backends")
    assert backends["python"][0].default_model_filename == "model.py"


def test_pb_utils_module_is_shipped() -> None:
    import triton_python_backend_utils as pb_utils

    assert pb_utils.TritonError.INVALID_ARG == 3
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.triton_string_to_numpy("TYPE_FP32").__name__ == "float32"
