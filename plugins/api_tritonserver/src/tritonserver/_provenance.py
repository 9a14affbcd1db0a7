"""Whose ``tritonserver`` this is, and a warning where NVIDIA's is installed too.

NVIDIA's wheel (distribution ``tritonserver``, with its C binding ``tritonserver._c``)
and this one (distribution ``despina-tritonserver-api``) provide the same top-level
packages; pip cannot keep both out of one environment, so importing either package
checks for the other distribution and warns.
"""

from __future__ import annotations

import importlib.metadata
import warnings

#: The distribution providing Despina's ``tritonserver`` and ``tritonfrontend``.
DISTRIBUTION = "despina-tritonserver-api"
#: The Triton release whose in-process API this one follows.
TRITON_API_VERSION = "2.71.0"


def version() -> str:
    """``<Triton API version>+despina.<distribution version>`` (a PEP 440 local version)."""
    try:
        own = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        own = "0"
    return f"{TRITON_API_VERSION}+despina.{own}"


def warn_if_shadowing(distribution: str) -> None:
    """Warn (RuntimeWarning) when NVIDIA's ``distribution`` is installed in this
    environment too: the two packages overlap, and which one Python imports depends on
    the order of its paths."""
    try:
        theirs = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return
    warnings.warn(
        f"NVIDIA's '{distribution}' {theirs} is installed in this environment as well as "
        f"Despina's ({DISTRIBUTION}); both provide the '{distribution}' package. "
        "Use one per environment (tritonserver.__despina__ is True in Despina's).",
        RuntimeWarning,
        stacklevel=3,
    )
