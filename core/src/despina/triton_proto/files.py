"""Loading one of Triton's ``.proto`` files from tritonclient's generated module (see the
package docstring)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper


def _generated_module(file_name: str) -> Path:
    """The path of tritonclient's generated ``grpc/<file_name>`` (not imported)."""
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "Triton's protobuf schemas come with tritonclient: pip install tritonclient"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "grpc" / file_name


def _serialized_descriptor(source: Path) -> bytes:
    """The bytes a generated module passes to ``AddSerializedFile`` (read from its
    source, which is never executed)."""
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise ImportError(f"no serialized file descriptor in {source}")


def schema_names(generated: str, proto: str) -> dict[str, Any]:
    """What the generated module ``generated`` (e.g. ``model_config_pb2.py``) defines for
    ``proto``: ``DESCRIPTOR``, message classes and top-level enums with their values.

    Adding a file identical to one already in the default pool (tritonclient's module
    imported first) is a no-op, and the message classes are cached per descriptor."""
    pool = descriptor_pool.Default()
    descriptor = pool.AddSerializedFile(_serialized_descriptor(_generated_module(generated)))
    names: dict[str, Any] = {"DESCRIPTOR": descriptor}
    for full_name, cls in message_factory.GetMessageClassesForFiles([proto], pool).items():
        if cls.DESCRIPTOR.file.name == proto and cls.DESCRIPTOR.containing_type is None:
            names[full_name.rsplit(".", 1)[-1]] = cls
    for name, enum in descriptor.enum_types_by_name.items():
        names[name] = enum_type_wrapper.EnumTypeWrapper(enum)
        names.update((value.name, value.number) for value in enum.values)
    return names
