"""Running a Triton ``qa/`` suite's own shell lines: blocks cut from the tree's
``test.sh`` at run time by marker lines, run by bash in the suite folder. The suites
keep only the markers; the shell text comes from the ``--triton-repo`` copy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def bash(cwd: Path, script: str, **env: str) -> None:
    """``script`` (test.sh's lines), run by ``bash -e`` in ``cwd`` with ``env`` exported."""
    subprocess.run(["bash", "-ec", script], cwd=cwd, env=dict(os.environ, **env), check=True)


def block(test_sh: Path, first: str, *last: str, after: str | None = None) -> str:
    """The lines of ``test_sh`` from the first line that starts with ``first`` (leading
    blanks aside) through the line that starts with ``last[-1]``, each of ``last`` looked
    for after the one before it (``last`` empty: the ``first`` line alone). With ``after``,
    the search starts below the first line that starts with it. A marker that is missing
    stops the run: the tree's test.sh is not the one this suite was written for."""
    lines = test_sh.read_text().splitlines(keepends=True)

    def find(marker: str, start: int) -> int:
        for i in range(start, len(lines)):
            if lines[i].lstrip().startswith(marker):
                return i
        raise SystemExit(f"{test_sh}: no line starting with {marker!r} after line {start}")

    begin = find(first, find(after, 0) + 1 if after is not None else 0)
    end = begin
    for marker in last:
        end = find(marker, end + 1)
    return "".join(lines[begin : end + 1])
