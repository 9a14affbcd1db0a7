"""Importing a ``model.py`` and the pieces of Triton's calling convention around it.

Server-independent: used in the server process (in-process mode) and in child processes
(paths with ``os.path``: a model process imports no more than its model needs).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import types
from typing import Any

#: Frames left out of a model's traceback: this package's and the import system's.
_OWN_FILES = (os.path.dirname(os.path.dirname(__file__)), "<frozen ")


def _server_files() -> tuple[str, ...]:
    """Where the code that calls into a model lives: this package, the import system,
    the standard library (threads, asyncio) and, where installed, the despina core."""
    core = importlib.util.find_spec("despina")
    origins = [] if core is None or core.origin is None else [os.path.dirname(core.origin)]
    return (*_OWN_FILES, os.path.dirname(os.__file__), *origins)


#: The outermost frames, up to the model's own, are the server's way in: left out.
_CALLER_FILES = _server_files()

#: The model folders (``<repository>/<model>/``) of the models imported in this process:
#: a traceback names their files relative to them, as clients may see it.
_MODEL_FOLDERS: set[str] = set()


def _shown(filename: str) -> str:
    """A frame's file as a client sees it: relative to its model folder
    (``1/model.py``), else its last component, never a server path."""
    for folder in _MODEL_FOLDERS:
        if filename.startswith(folder):
            return filename[len(folder) :]
    return os.path.basename(filename)


def load_model_class(model_file: str | os.PathLike[str], package: str | None = None) -> type[Any]:
    """Import ``model_file`` as a module of its version folder and return its
    ``TritonPythonModel``.

    As Triton's stub, the version folder and the model folder go on ``sys.path`` and the
    module is ``<version>.<file stem>`` (``1.model``), a module of the version folder as a
    package, so ``from . import helper`` works. ``package`` names that package instead of
    the version folder's name (a process serving several models gives each its own).
    """
    model_file = os.fspath(model_file)
    if not os.path.isfile(model_file):
        raise FileNotFoundError(f"Python model file not found in '{model_file}'")
    version_dir = os.path.dirname(model_file)
    model_dir = os.path.dirname(version_dir)
    stem = os.path.splitext(os.path.basename(model_file))[0]
    _MODEL_FOLDERS.add(f"{model_dir}/")
    for folder in (version_dir, model_dir):
        if folder not in sys.path:
            sys.path.append(folder)
    package = package or os.path.basename(version_dir)
    holder = types.ModuleType(package)
    holder.__path__ = [version_dir]
    holder.__package__ = package
    sys.modules[package] = holder
    module_name = f"{package}.{stem}"
    spec = importlib.util.spec_from_file_location(module_name, model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{model_file}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    model_class = getattr(module, "TritonPythonModel", None)
    if not isinstance(model_class, type):
        where = f"{os.path.basename(version_dir)}.{stem}"  # Triton's module name
        raise AttributeError(f"module '{where}' has no attribute 'TritonPythonModel'")
    return model_class


def initialize_args(
    model_config_json: str,
    model_dir: str | os.PathLike[str],
    name: str,
    version: int,
    instance_name: str,
    kind: str,
    device_id: int,
) -> dict[str, str]:
    """Triton's ``initialize(args)`` dictionary (all values are strings)."""
    return {
        "model_config": model_config_json,
        "model_instance_kind": kind.removeprefix("KIND_"),
        "model_instance_name": instance_name,
        "model_instance_device_id": str(device_id),
        "model_repository": os.fspath(model_dir),
        "model_version": str(version),
        "model_name": name,
    }


#: What model code may raise that must fail only the call: ``sys.exit()`` and a stray
#: KeyboardInterrupt included (out of an ``await`` they would stop the server's loop).
MODEL_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt)


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` then ``At:`` and the model's frames, innermost first (Triton's form):
    from the first frame outside the server's calling code, without this package's; each
    frame's file relative to its model folder (:func:`_shown`: no server path)."""
    text = f"{type(exc).__name__}: {exc}"
    stack = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(stack) if not f.filename.startswith(_CALLER_FILES)), 0)
    frames = [
        f"  {_shown(frame.filename)}({frame.lineno}): {frame.name}\n"
        for frame in stack[first:]
        if not frame.filename.startswith(_OWN_FILES)
    ]
    if frames:
        text += "\n\nAt:\n" + "".join(reversed(frames))
    return text
