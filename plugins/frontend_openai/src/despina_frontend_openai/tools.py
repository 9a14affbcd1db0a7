"""Tool calls in generated text (``--tool-call-parser``), streamed as OpenAI deltas.

A call is a JSON object with a string ``name`` and its ``arguments`` (or ``parameters``,
Llama's word); a JSON list of such objects is several calls. The formats:

- ``hermes``: ``<tool_call>{...}</tool_call>`` anywhere in the reply (the closing tag
  may be missing at the end); the text outside the tags is content.
- ``llama3``: a reply that starts with ``<|python_tag|>`` or ``{``: call objects
  separated by ``;``.
- ``mistral``: ``[TOOL_CALLS]`` and a list of call objects, anywhere; or a reply that
  starts with such a list. Its call ids are 9 letters and digits (Mistral's chat
  templates refuse other ids when the calls come back in the conversation).
- ``json``: a reply that starts with a call object or a list of them.

Text after a format's calls is content again. Streamed and whole replies are read by the
same :class:`ToolParser`. The contract of a streamed reply:

1. Content streams as it comes. From where a call may start (its marker, or a prefix of
   one at the end of the text so far) the text is held.
2. A call is *opened* by one delta carrying its index, id, type and name (arguments
   ``""``) once its name is complete and its arguments have started (or its object
   closed without any). Held text that turns out to be no call (not JSON, no string
   name, ...) before any call of its block opened goes out as content, all of it.
3. An opened call's arguments object streams as fragments as it is generated. Each
   fragment extends text that :class:`~despina_frontend_openai.jsonscan.ObjectScan` has
   checked to be a prefix of a valid JSON object, so the fragments joined are a JSON
   prefix at every moment, and a complete call's arguments parse as a JSON object.
   Arguments that are not an object (a string, ...) go out whole once complete.
4. What is held is bounded: a request reads at most ``limit`` bytes of tool-call text
   (markers, held text and streamed arguments, from each possible call's start); past
   it :attr:`ToolParser.overflow` is set and the reply ends with finish reason
   ``length``, the generation cancelled (Triton's ``--max-tool-call-parse-bytes``).
5. An opened call cannot be taken back. If its block breaks afterwards (the JSON
   breaks, a later item is no call, the text ends inside the block), the parser stops
   and sets :attr:`ToolParser.broken`; the frontend then ends the stream with an error
   event rather than a normal end, so no client takes a broken call for a finished one.
   Only when the generation was cut (``max_tokens`` reached) may a reply end inside an
   opened call: its finish reason is ``length`` and its arguments are a JSON prefix, as
   OpenAI's own truncated calls.

A whole (non-streamed) reply has sent nothing yet: where a stream would break or be
cut inside a call, or past ``limit``, the whole reply is content without calls.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from despina_frontend_openai.jsonscan import ObjectScan, Part

_WS = " \t\n\r"
#: The member names whose value is a call's arguments.
_ARGUMENTS = ("arguments", "parameters")


def _openai_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _mistral_id() -> str:
    return uuid.uuid4().hex[:9]


@dataclass(frozen=True)
class Format:
    """Where a format's calls start and what may follow each call object."""

    #: Markers that open calls anywhere in the content (the marker itself is dropped).
    anywhere: tuple[str, ...] = ()
    #: Markers that open calls at the reply's start (after whitespace); ``{`` and ``[``
    #: are the JSON's own first character.
    at_start: tuple[str, ...] = ()
    #: An optional tag after each call object outside a list.
    closer: str = ""
    #: What separates call objects outside a list.
    separator: str = ""
    new_id: Callable[[], str] = _openai_id


FORMATS: dict[str, Format] = {
    "hermes": Format(anywhere=("<tool_call>",), closer="</tool_call>"),
    "llama3": Format(at_start=("<|python_tag|>", "{"), separator=";"),
    "mistral": Format(anywhere=("[TOOL_CALLS]",), at_start=("[",), new_id=_mistral_id),
    "json": Format(at_start=("{", "[")),
}


class _Mode(Enum):
    CONTENT = auto()
    OPENED = auto()  # after a marker: a call object or a list of them
    LIST_FIRST = auto()  # after "[": a call object (or "]")
    LIST_NEXT = auto()  # after "," in the list: a call object
    LIST_AFTER = auto()  # after an item: "," or "]"
    CALL = auto()  # inside a call object
    AFTER_CALL = auto()  # after a call object outside a list: closer, separator or the end
    SEPARATED = auto()  # after the separator: the next call object


@dataclass
class _Call:
    """One call object being read."""

    index: int
    scan: ObjectScan = field(default_factory=ObjectScan)
    key_raw: str = ""
    key: str | None = None
    value_raw: str = ""
    name: str | None = None
    #: The complete arguments text, once read.
    arguments: str | None = None
    args_started: bool = False
    #: The arguments are an object streamed as it comes.
    streaming: bool = False
    id: str | None = None


class ToolParser:
    """One reply's parser: :meth:`feed` each generated piece, then :meth:`end`; each
    returns the deltas (``{"content": ...}`` or ``{"tool_calls": [...]}``) to send."""

    def __init__(self, kind: str, limit: int) -> None:
        self.format = FORMATS[kind]
        self.limit = limit
        #: True once more than ``limit`` bytes of tool-call text were read.
        self.overflow = False
        #: Why an opened call's block broke (see the module's contract), or None.
        self.broken: str | None = None
        #: The complete calls so far, as OpenAI's ``tool_calls`` items.
        self.calls: list[dict[str, Any]] = []
        self._mode = _Mode.CONTENT
        self._start = True  # nothing but whitespace read yet
        self._pending = ""  # content held: a possible marker's start
        self._held = ""  # the block's text while none of its calls opened
        self._committed = False  # a call of the current block opened
        self._in_list = False
        self._closer_at = 0
        self._read = 0
        self._opened = 0
        self._call: _Call | None = None
        self._out: list[dict[str, Any]] = []

    @classmethod
    def parse(cls, kind: str, limit: int, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """(content, calls) of a whole reply: ``(text, [])`` when it holds no complete
        call or a call breaks (nothing was sent, so nothing needs taking back)."""
        parser = cls(kind, limit)
        deltas = parser.feed(text) + parser.end(cut=False)
        if parser.broken or parser.overflow or not parser.calls:
            return text, []
        content = "".join(d.get("content", "") for d in deltas).strip()
        return content or None, parser.calls

    def feed(self, piece: str) -> list[dict[str, Any]]:
        """The deltas ``piece`` completes (none once :attr:`overflow` or :attr:`broken`)."""
        self._out = []
        text, i = self._pending + piece, 0
        self._pending = ""
        while i < len(text) and self.broken is None and not self.overflow:
            if self._mode is _Mode.CONTENT:
                i = self._content(text, i)
                continue
            c = text[i]
            i += 1
            self._read += 1 if c < "\x80" else len(c.encode())
            if not self._committed:
                self._held += c
            redo = self._block(c)
            if redo:
                text, i = redo + text[i:], 0
            self.overflow = self._read > self.limit
        if len(self._pending.encode()) > self.limit:
            self.overflow = True
        return self._out

    def end(self, cut: bool) -> list[dict[str, Any]]:
        """The deltas of the text still held when the generation ends; ``cut``: it ended
        at ``max_tokens``. Sets :attr:`broken` when it ends inside an opened call's block
        without being cut."""
        self._out = []
        if self.broken is not None or self.overflow:
            return []
        if self._mode is _Mode.CONTENT:
            self._emit_content(self._pending)
        elif not self._committed:
            self._emit_content(self._held + self._pending)
        elif not self._finished() and not cut:
            self.broken = "the reply ended inside a tool call"
        self._pending = self._held = ""
        return self._out

    def finish_reason(self) -> str | None:
        """``tool_calls`` when the reply called a tool and no call was left open."""
        return "tool_calls" if self.calls and self._finished() else None

    def _finished(self) -> bool:
        """Whether the text read so far ends outside any call (a list may stay open)."""
        return self._mode in (_Mode.CONTENT, _Mode.AFTER_CALL, _Mode.SEPARATED, _Mode.LIST_AFTER)

    # content

    def _content(self, text: str, i: int) -> int:
        """Read content from ``i`` up to a call's start (entering its block) or the end;
        the next index to read."""
        fmt = self.format
        if self._start and fmt.at_start:
            j = i
            while j < len(text) and text[j] in _WS:
                j += 1
            rest = text[j:]
            for marker in (*fmt.anywhere, *fmt.at_start):
                if rest.startswith(marker):
                    own = marker in ("{", "[")
                    self._begin(text[i:j] + ("" if own else marker))
                    return j + (0 if own else len(marker))
                if marker.startswith(rest):
                    self._pending = text[i:]
                    return len(text)
            self._start = False
        hits = [(text.find(m, i), m) for m in fmt.anywhere]
        found = [(at, m) for at, m in hits if at >= 0]
        if found:
            at, marker = min(found)
            self._emit_content(text[i:at])
            self._begin(marker)
            return at + len(marker)
        keep = max(
            (n for m in fmt.anywhere for n in range(1, len(m)) if text.endswith(m[:n])),
            default=0,
        )
        keep = min(keep, len(text) - i)
        self._emit_content(text[i : len(text) - keep])
        self._pending = text[len(text) - keep :]
        return len(text)

    def _begin(self, held: str) -> None:
        self._mode, self._held, self._committed, self._start = _Mode.OPENED, held, False, False
        self._in_list = False
        self._read += len(held.encode())

    def _end_block(self) -> None:
        self._mode, self._held, self._call = _Mode.CONTENT, "", None

    def _fail(self, reason: str, c: str) -> str:
        """A block that is no call (content, ``c`` read again) or, once one of its calls
        opened, a broken one."""
        if self._committed:
            self.broken = reason
            return ""
        self._emit_content(self._held[: -len(c)])
        self._end_block()
        return c

    # the block of calls

    def _block(self, c: str) -> str:
        """Read one character of a block; text to read again as content, else ""."""
        mode = self._mode
        if mode is _Mode.CALL:
            return self._call_char(c)
        if mode is _Mode.AFTER_CALL:
            return self._after_call(c)
        if c in _WS:
            return ""
        if mode is _Mode.LIST_AFTER:
            if c == ",":
                self._mode = _Mode.LIST_NEXT
                return ""
            if c == "]":
                self._end_block()
                return ""
            return self._fail(f"expected ',' or ']' between tool calls, got {c!r}", c)
        if c == "{":
            self._call = _Call(self._opened)
            self._mode = _Mode.CALL
            return self._call_char(c)
        if mode is _Mode.OPENED and c == "[":
            self._in_list, self._mode = True, _Mode.LIST_FIRST
            return ""
        if mode is _Mode.SEPARATED:
            self._end_block()
            return c
        return self._fail(f"expected a tool call object, got {c!r}", c)

    def _after_call(self, c: str) -> str:
        closer = self.format.closer
        if self._closer_at < len(closer):
            if c == closer[self._closer_at]:
                self._closer_at += 1
                return ""
            if self._closer_at:  # a false start of the closer: content again
                self._end_block()
                return closer[: self._closer_at] + c
        if c in _WS:
            return ""
        if self.format.separator and c == self.format.separator:
            self._mode = _Mode.SEPARATED
            return ""
        self._end_block()
        return c

    def _call_char(self, c: str) -> str:
        call = self._call
        assert call is not None
        try:
            part = call.scan.push(c)
        except ValueError as exc:
            return self._fail(f"tool call {call.index} is not valid JSON: {exc}", c)
        if part is Part.KEY:
            call.key_raw += c
            return ""
        if call.key_raw:
            call.key, call.key_raw = json.loads(call.key_raw), ""
        if part is Part.VALUE:
            if not call.value_raw:
                error = self._value_starts(call, c)
                if error:
                    return self._fail(error, c)
            call.value_raw += c
            if call.streaming and call.id is not None and call.key in _ARGUMENTS:
                self._emit_arguments(call, c)
            return ""
        if call.value_raw:
            error = self._member_done(call)
            if error:
                return self._fail(error, c)
        if call.scan.done:
            return self._call_done(call, c)
        return ""

    def _value_starts(self, call: _Call, c: str) -> str:
        if call.key not in _ARGUMENTS:
            return ""
        if call.args_started:
            return f"tool call {call.index} has both arguments and parameters"
        call.args_started, call.streaming = True, c == "{"
        if call.name is not None:
            self._open(call)
        return ""

    def _member_done(self, call: _Call) -> str:
        raw, call.value_raw = call.value_raw, ""
        if call.key == "name":
            name = json.loads(raw)
            if call.name is not None or not isinstance(name, str):
                return f"tool call {call.index} has no single string name"
            call.name = name
            if call.arguments is not None:  # the arguments came first
                self._open(call)
                self._emit_arguments(call, call.arguments)
        elif call.key in _ARGUMENTS:
            value = json.loads(raw)
            call.arguments = raw if call.streaming else _as_arguments(value)
            if call.id is not None and not call.streaming:
                self._emit_arguments(call, call.arguments)
        return ""

    def _call_done(self, call: _Call, c: str) -> str:
        if call.name is None:
            return self._fail(f"tool call {call.index} has no name", c)
        if call.id is None:
            self._open(call)
        if call.arguments is None:
            call.arguments = "{}"
            self._emit_arguments(call, call.arguments)
        assert call.id is not None
        self.calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        )
        self._call = None
        self._mode = _Mode.LIST_AFTER if self._in_list else _Mode.AFTER_CALL
        self._closer_at = 0
        return ""

    # deltas

    def _open(self, call: _Call) -> None:
        call.id = self.format.new_id()
        self._opened += 1
        self._committed, self._held = True, ""
        function = {"name": call.name, "arguments": ""}
        item = {"index": call.index, "id": call.id, "type": "function", "function": function}
        self._out.append({"tool_calls": [item]})

    def _emit_arguments(self, call: _Call, text: str) -> None:
        last = self._out[-1]["tool_calls"][0] if self._out and "tool_calls" in self._out[-1] else {}
        if last.get("index") == call.index and "id" not in last:
            last["function"]["arguments"] += text
        else:
            item = {"index": call.index, "function": {"arguments": text}}
            self._out.append({"tool_calls": [item]})

    def _emit_content(self, text: str) -> None:
        if not text:
            return
        if text.strip():
            self._start = False
        if self._out and "content" in self._out[-1]:
            self._out[-1]["content"] += text
        else:
            self._out.append({"content": text})


def _as_arguments(value: Any) -> str:
    """OpenAI's ``arguments`` string for a non-object value: a string as it is, any
    other JSON value as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
