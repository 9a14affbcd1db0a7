"""Despina's Python backend: serves Triton ``model.py`` files unchanged.

``pb/`` holds the ``triton_python_backend_utils`` API (numpy only, no server imports, so
it also runs in child processes and foreign execution environments); the other modules
are the server side: :mod:`.backend` (the Backend), :mod:`.inprocess` and
:mod:`.process` (the two execution modes), :mod:`.server_runtime` (BLS, logs, metrics).
"""
