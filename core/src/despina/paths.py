"""Paths taken from requests or configs, kept inside the folder they belong to."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from despina.errors import InvalidArgument


def safe_join(root: Path, relative: str, what: str = "path") -> Path:
    """``root/relative`` when it stays inside ``root`` (no ``..``, no absolute path, no
    link leading out); raise InvalidArgument naming ``what`` otherwise."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise InvalidArgument(f"invalid {what} '{relative}'")
    target = root.joinpath(*path.parts)
    if not target.resolve().is_relative_to(root.resolve()):
        raise InvalidArgument(f"invalid {what} '{relative}'")
    return target
