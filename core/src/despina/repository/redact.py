"""Error texts without the server's file system paths (the CVE-2025-23320 class).

What a failing model load reports (a Python traceback, an ``OSError``) names files by
absolute path: the repository's, a temporary override folder's, the server's own.
:func:`safe_text` rewrites such a text before it leaves the server; the server log keeps
the original; :func:`without_paths` does both for the error that failed a model's load.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

from despina.errors import DespinaError

log = logging.getLogger("despina.models")

#: An absolute path: a slash at the start of the text or after a space, quote, bracket or
#: ``=``, up to a space, quote, bracket, colon, comma or semicolon.
_ABSOLUTE = re.compile(r"(?<![^\s'\"(\[=])/[^\s'\"()\[\]:;,]*")


def safe_text(text: str, model_dir: Path, roots: Iterable[Path] = ()) -> str:
    """``text`` with each absolute path under ``model_dir`` made relative to it
    (``1/model.py``), each under one of ``roots`` (the repositories) relative to that
    root, and any other absolute path cut to its last component (``weights.bin``).
    Folders count as given and resolved (a symlinked ``/tmp`` matches either way)."""
    folders = [model_dir, *roots]
    bases = sorted(
        {str(f).rstrip("/") + "/" for folder in folders for f in (folder, folder.resolve())},
        key=len,
        reverse=True,  # the deepest first: the model folder before its repository
    )

    def relative(match: re.Match[str]) -> str:
        path = match[0]
        for base in bases:
            if path.startswith(base):
                return path[len(base) :] or "."
        return path.rstrip("/").rpartition("/")[2] or "."

    return _ABSOLUTE.sub(relative, text)


def without_paths(error: DespinaError, model_dir: Path, roots: Iterable[Path]) -> DespinaError:
    """``error``, which failed the load of the model in ``model_dir``, its text rewritten
    (in place) by :func:`safe_text` with the repository ``roots``: the text clients see,
    in the load's answer and the repository index. The full text is logged first."""
    full = str(error)
    text = safe_text(full, model_dir, roots)
    if text != full:
        log.error("failed to load '%s' (told to clients without paths): %s", model_dir.name, full)
        error.args = (text,)
    return error
