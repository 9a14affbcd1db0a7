"""pb_utils imports as in Triton (discovery through the entry point is checked by the
conformance suite, test_conformance.py)."""

from __future__ import annotations


def test_pb_utils_module_is_shipped() -> None:
    import triton_python_backend_utils as pb_utils

    assert pb_utils.TritonError.INVALID_ARG == 3
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.triton_string_to_numpy("TYPE_FP32").__name__ == "float32"
