"""Triton's model loading API for BLS models: ``is_model_ready``, ``load_model``,
``unload_model`` (load/unload need ``--model-control-mode=explicit``), and
``get_model_dir``."""

from __future__ import annotations

from despina_backend_python.pb import runtime


def get_model_dir() -> str:
    """The calling model's version folder (``<repository>/<model>/<version>``), where its
    ``model.py`` is, or, for a Python-based backend, where that model's own files are."""
    return runtime.current().model_dir


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(runtime.current().model_control("ready", name=model_name, version=model_version))


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name``; ``files`` keys are ``"file:<path>"`` as in Triton."""
    runtime.current().model_control("load", name=model_name, config=config, files=files or {})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    runtime.current().model_control("unload", name=model_name, unload_dependents=unload_dependents)
