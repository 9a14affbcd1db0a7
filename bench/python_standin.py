"""Bench-only stand-in for the Python backend: answers Triton's Python-backend ``add_sub``
model (``backend: "python"``, ``model.py``) with the in-process ``bench`` add_sub, without
running model.py. Lets the peers kit serve its own repository while the real Python
backend plugin is not installed (with it installed, the two would claim one name)::

    PYTHONPATH=bench despina serve --plugin python_standin --model-repository <peers>/despina/model_repository
"""

from __future__ import annotations

from bench_backend import AddSubBackend
from despina.backend import Backend
from despina.hookspecs import hookimpl


class PythonStandIn(AddSubBackend):
    name = "python"
    default_model_filename = "model.py"


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [PythonStandIn]
