"""Despina's Python backend: serves Triton ``model.py`` files unchanged.

Grouped by where the code runs: :mod:`.server` (the Despina server: the Backend, its
execution modes, child processes, BLS), :mod:`.model_process` (a ``process``-mode model's
own process), :mod:`.wire` (between the two, used by both), :mod:`.hosting` (Triton's
calling convention, wherever the model runs) and :mod:`.pb` (the
``triton_python_backend_utils`` API: numpy only, no server imports, so it also runs in
child processes and foreign execution environments). :mod:`.plugin` is the entry point.
"""
