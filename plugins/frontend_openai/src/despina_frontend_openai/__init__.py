"""Despina's OpenAI-compatible frontend (``despina-frontend-openai``): Triton's OpenAI
frontend's endpoints and flags, served on the Despina server's event loop.

The public API is for Python LLM models: guided decoding of their logits step
(:class:`Guides`, :class:`Guide`, :data:`GUIDE_TYPES`; the ``guided`` extra), imported on
first use so that the frontend itself loads without xgrammar or torch. Every module is
internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from despina_frontend_openai.guide import GUIDE_TYPES, Guide, Guides

__all__ = ["GUIDE_TYPES", "Guide", "Guides"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from despina_frontend_openai import guide

        return getattr(guide, name)
    raise AttributeError(f"module 'despina_frontend_openai' has no attribute '{name}'")
