"""Despina: a Triton-compatible model inference server in Python, built on pluggy."""

from __future__ import annotations

__version__ = "0.1.0"
