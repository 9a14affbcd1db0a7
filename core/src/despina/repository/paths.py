"""Names and paths taken from clients or configs, kept inside the folder they belong to.

This is the one place that turns a client-given model name, a file override path or a
config field naming a file (``default_model_filename``, ``label_filename``, warm-up and
initial-state data files) into a path. Every caller goes through :func:`check_model_name`
or :func:`safe_join`; nothing else joins such strings onto a folder.

The rules: a model name is one POSIX path component (non-empty, no ``/``, not ``.`` or
``..``, no NUL or other control character, at most 255 bytes in UTF-8, as ``NAME_MAX``);
a relative path is made of such components, is never absolute, and, once symlinks are
resolved, still lies inside its root. Refusals are :class:`InvalidArgument` (HTTP 400,
gRPC INVALID_ARGUMENT) and quote the offending text shortened to :data:`QUOTE_CHARS`.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from despina.errors import InvalidArgument

#: Longest name component, in UTF-8 bytes (Linux NAME_MAX).
MAX_NAME_BYTES = 255
#: Longest relative path, in UTF-8 bytes (Linux PATH_MAX less room for the root).
MAX_PATH_BYTES = 1024
#: How much of a refused name an error text quotes.
QUOTE_CHARS = 80


def quote(text: str) -> str:
    """``text`` shortened for an error message (a 5,000-character name is not echoed)."""
    return text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}... ({len(text)} chars)"


def _component_problem(part: str) -> str | None:
    """Why ``part`` cannot be one path component, or None when it can."""
    if part in ("", ".", ".."):
        return "must not contain path traversal characters"
    if "/" in part:
        return "must not contain path traversal characters"
    if any(ord(c) < 0x20 or c == "\x7f" for c in part):
        return "must not contain control characters"
    if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"must be at most {MAX_NAME_BYTES} bytes long"
    return None


def check_model_name(name: str) -> str:
    """Return ``name`` when it can name a model folder; raise InvalidArgument with
    Triton's texts otherwise (an empty or blank name, ``..``, a ``/``), and for what
    Triton lets through to the file system (``.``, control characters, more than :data:`MAX_NAME_BYTES` bytes)."""
    if not name.strip():
        raise InvalidArgument("Model name cannot be empty. Please enter a valid name to deploy.")
    problem = _component_problem(name.strip()) or _component_problem(name)
    if problem is not None:
        raise InvalidArgument(f"invalid model name '{quote(name)}', model name {problem}")
    return name


def relative_parts(relative: str, what: str) -> tuple[str, ...]:
    """The components of a relative path given by a client or a config field; raise
    InvalidArgument naming ``what`` for an absolute path, ``..``, a control character, an
    over-long component or path, or nothing at all. ``.`` components and repeated
    slashes are dropped, as the file system would."""
    if len(relative.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidArgument(
            f"invalid {what} '{quote(relative)}': longer than {MAX_PATH_BYTES} bytes"
        )
    path = PurePosixPath(relative)
    if path.is_absolute():
        raise InvalidArgument(f"invalid {what} '{quote(relative)}': must be a relative path")
    parts = path.parts
    for part in parts:
        problem = _component_problem(part)
        if problem is not None:
            raise InvalidArgument(f"invalid {what} '{quote(relative)}': a path component {problem}")
    if not parts:
        raise InvalidArgument(f"invalid {what} '{quote(relative)}': names no file")
    return parts


def safe_join(root: Path, relative: str, what: str = "path") -> Path:
    """``root/relative`` when it stays inside ``root``, symlinks resolved; raise
    InvalidArgument naming ``what`` otherwise (see :func:`relative_parts`). The target
    need not exist."""
    target = root.joinpath(*relative_parts(relative, what))
    try:
        inside = os.path.realpath(target).startswith(os.path.join(os.path.realpath(root), ""))
    except (OSError, ValueError):
        inside = False
    if not inside:
        raise InvalidArgument(
            f"invalid {what} '{quote(relative)}': it leads outside the folder it belongs to"
        )
    return target
