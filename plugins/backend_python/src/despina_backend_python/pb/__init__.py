"""The ``triton_python_backend_utils`` API, importable without the server (numpy only)."""
