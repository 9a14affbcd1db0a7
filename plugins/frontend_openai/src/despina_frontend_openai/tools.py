"""Tool calls in generated text (``--tool-call-parser``).

``hermes``: each call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
text before the first tag is the reply's content. ``json``: a reply that is a JSON
object (or list of them) with ``name`` and ``arguments`` (or ``parameters``) is the call.

While streaming, content is passed on as it comes until a call may be starting; from
there the text is held (at most ``limit`` bytes) and parsed when the generation ends.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_OPEN = "<tool_call>"


def _call(obj: Any) -> dict[str, Any] | None:
    """An OpenAI tool call from a parsed ``{"name", "arguments"}`` object, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": arguments},
    }


class ToolParser:
    """One request's parser; :meth:`feed` while streaming, :meth:`parse` on the end."""

    def __init__(self, kind: str, limit: int) -> None:
        self.kind = kind
        self.limit = limit
        self.held = ""  # text held back from the stream (a call may be in it)
        self.holding = False
        #: True once the held text passed ``limit`` (the reply ends there).
        self.overflow = False

    def parse(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """(content, tool calls) of a whole reply; text that parses as no call is content."""
        if self.kind == "hermes":
            start = text.find(_OPEN)
            if start < 0:
                return text, []
            calls: list[dict[str, Any]] = []
            for body in _HERMES.findall(text[start:]):
                try:
                    call = _call(json.loads(body))
                except ValueError:
                    call = None
                if call is None:
                    return text, []
                calls.append(call)
            return (text[:start].strip() or None), calls
        try:
            parsed = json.loads(text)
        except ValueError:
            return text, []
        items = parsed if isinstance(parsed, list) else [parsed]
        calls = [c for c in (_call(item) for item in items) if c is not None]
        if not calls or len(calls) != len(items):
            return text, []
        return None, calls

    def feed(self, delta: str) -> str:
        """The part of ``delta`` to stream as content now; the rest is held."""
        if self.holding:
            self.held += delta
        else:
            text = self.held + delta
            start = self._call_start(text)
            if start is None:
                self.held = ""
                return text
            self.held, self.holding = text[start:], self._certain(text[start:])
            text = text[:start]
            if self.holding:
                self.overflow = len(self.held.encode()) > self.limit
            return text
        self.overflow = len(self.held.encode()) > self.limit
        return ""

    def _call_start(self, text: str) -> int | None:
        """Where a tool call starts, or may be starting (a prefix of the tag at the end)."""
        if self.kind == "json":
            stripped = text.lstrip()
            return len(text) - len(stripped) if stripped[:1] in ("{", "[") else None
        at = text.find(_OPEN)
        if at >= 0:
            return at
        for size in range(min(len(_OPEN) - 1, len(text)), 0, -1):
            if text.endswith(_OPEN[:size]):
                return len(text) - size
        return None

    def _certain(self, held: str) -> bool:
        return self.kind == "json" or held.startswith(_OPEN)
