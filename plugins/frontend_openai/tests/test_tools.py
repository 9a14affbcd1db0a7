"""The tool-call parsers and their streaming contract (tools.py), on generated texts cut
into pieces every way: the stream agrees with the whole reply, a call opens with its
name before any argument, the arguments joined are a JSON prefix at every moment."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from despina_frontend_openai.jsonscan import ObjectScan
from despina_frontend_openai.tools import ToolParser

LIMIT = 128 * 1024
CALL = {"name": "get_weather", "arguments": {"city": "Oslo", "when": ["today", 1.5e3, None]}}
ARGS = json.dumps(CALL["arguments"])
OTHER = {"name": "get_time", "parameters": {"zone": "CET"}}

#: (parser, reply, expected content, expected [(name, arguments)]).
CASES: list[tuple[str, str, str | None, list[tuple[str, Any]]]] = [
    (
        "hermes",
        f"Let me look.\n<tool_call>\n{json.dumps(CALL)}\n</tool_call>",
        "Let me look.",
        [("get_weather", CALL["arguments"])],
    ),
    (
        "hermes",
        f"<tool_call>{json.dumps(CALL)}</tool_call><tool_call>{json.dumps(OTHER)}",
        None,
        [("get_weather", CALL["arguments"]), ("get_time", {"zone": "CET"})],
    ),
    ("hermes", "a < b and <tool_c is no tag", "a < b and <tool_c is no tag", []),
    (
        "hermes",
        '<tool_call>{"no": "name"}</tool_call> then <tool_call>{"name": "f"}</tool_call>',
        '<tool_call>{"no": "name"}</tool_call> then',
        [("f", {})],
    ),
    ("llama3", f"<|python_tag|>{json.dumps(OTHER)}", None, [("get_time", {"zone": "CET"})]),
    (
        "llama3",
        f"{json.dumps(CALL)}; {json.dumps(OTHER)}",
        None,
        [("get_weather", CALL["arguments"]), ("get_time", {"zone": "CET"})],
    ),
    ("llama3", "Sure: {not a call}", "Sure: {not a call}", []),
    ("llama3", '{"answer": 42}', '{"answer": 42}', []),
    (
        "mistral",
        f"Checking. [TOOL_CALLS] [{json.dumps(CALL)}, {json.dumps(OTHER)}]",
        "Checking.",
        [("get_weather", CALL["arguments"]), ("get_time", {"zone": "CET"})],
    ),
    ("mistral", f"[{json.dumps(CALL)}]", None, [("get_weather", CALL["arguments"])]),
    ("mistral", "[1] a list item", "[1] a list item", []),
    ("json", f"  {json.dumps(CALL)}", None, [("get_weather", CALL["arguments"])]),
    (
        "json",
        f"[{json.dumps(OTHER)}] done",
        "done",
        [("get_time", {"zone": "CET"})],
    ),
    (
        "json",
        '{"arguments": "{\\"a\\": 1}", "name": "f"}',
        None,
        [("f", {"a": 1})],
    ),
    ("json", "plain text", "plain text", []),
]


def _stream(kind: str, pieces: list[str]) -> tuple[ToolParser, list[dict[str, Any]]]:
    parser = ToolParser(kind, LIMIT)
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    return parser, deltas + parser.end(cut=False)


def _cuts(text: str, seed: int) -> list[list[str]]:
    """The text one character at a time, whole, and in random pieces."""
    rng = random.Random(seed)
    bounds = sorted(rng.sample(range(1, len(text)), min(8, len(text) - 1)))
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    return [list(text), [text], pieces]


def _calls_of(deltas: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The calls the deltas build, checking each opens with its name and empty arguments
    before any fragment, and that its arguments stay a JSON object's prefix."""
    calls: list[list[str]] = []
    for delta in deltas:
        for item in delta.get("tool_calls", []):
            if "id" in item:
                assert item["index"] == len(calls) and item["type"] == "function"
                assert item["function"]["arguments"] == ""
                calls.append([item["function"]["name"], ""])
                continue
            assert item["index"] == len(calls) - 1 and set(item["function"]) == {"arguments"}
            calls[-1][1] += item["function"]["arguments"]
            if calls[-1][1].startswith("{"):
                scan = ObjectScan()
                for c in calls[-1][1]:
                    scan.push(c)  # raises on a fragment that is no JSON prefix
    return [(name, arguments) for name, arguments in calls]


@pytest.mark.parametrize(("kind", "text", "content", "calls"), CASES)
def test_whole_and_streamed_replies_agree(
    kind: str, text: str, content: str | None, calls: list[tuple[str, Any]]
) -> None:
    whole_content, whole_calls = ToolParser.parse(kind, LIMIT, text)
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole_calls]
    assert got == calls
    assert whole_content == (content if calls else text)
    for seed, pieces in enumerate(_cuts(text, len(text))):
        parser, deltas = _stream(kind, pieces)
        assert parser.broken is None and not parser.overflow, seed
        streamed = [(n, json.loads(a)) for n, a in _calls_of(deltas)]
        assert streamed == calls
        text_out = "".join(d.get("content", "") for d in deltas)
        assert text_out.strip() == (content or "") if calls else text_out == text
        assert parser.finish_reason() == ("tool_calls" if calls else None)


def test_arguments_stream_before_the_call_ends() -> None:
    text = f"<tool_call>{json.dumps(CALL)}</tool_call>"
    parser = ToolParser("hermes", LIMIT)
    cut = text.index("Oslo") + 2
    deltas = parser.feed(text[:cut])
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert deltas[-1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Os'


def test_arguments_before_the_name_wait_for_it() -> None:
    text = '{"parameters": {"a": 1}, "name": "f"}'
    parser = ToolParser("llama3", LIMIT)
    assert parser.feed(text[:-8]) == []  # no name yet: nothing can open
    deltas = parser.feed(text[-8:])
    assert _calls_of(deltas) == [("f", '{"a": 1}')]


def test_a_call_that_breaks_after_it_opened_is_reported_not_sent_as_content() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a": [1}}</tool_call> tail'
    parser, deltas = _stream("hermes", list(text))
    assert parser.broken is not None and "not valid JSON" in parser.broken
    assert not any("content" in d for d in deltas)
    assert parser.finish_reason() is None
    assert ToolParser.parse("hermes", LIMIT, text) == (text, [])


def test_a_reply_that_ends_inside_a_call() -> None:
    text = f"[TOOL_CALLS][{json.dumps(CALL)[:-10]}"
    ended = ToolParser("mistral", LIMIT)
    ended.feed(text)
    ended.end(cut=False)
    assert ended.broken == "the reply ended inside a tool call"
    cut = ToolParser("mistral", LIMIT)
    streamed = _calls_of(cut.feed(text) + cut.end(cut=True))
    assert cut.broken is None and cut.finish_reason() is None  # the frontend says length
    assert ARGS.startswith(streamed[0][1])
    assert ToolParser.parse("mistral", LIMIT, text) == (text, [])


def test_mistral_ids_are_nine_letters_and_digits() -> None:
    _, calls = ToolParser.parse("mistral", LIMIT, f"[TOOL_CALLS][{json.dumps(OTHER)}]")
    assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum()


def test_both_arguments_and_parameters_is_no_call() -> None:
    text = '{"name": "f", "arguments": {}, "parameters": {}}'
    assert ToolParser.parse("json", LIMIT, text) == (text, [])


def test_the_limit_bounds_what_is_read() -> None:
    parser = ToolParser("hermes", 64)
    deltas = parser.feed("hello <tool_call>")
    assert deltas == [{"content": "hello "}] and not parser.overflow
    parser.feed('{"name": "f", "arguments": {"x": "' + "y" * 100)
    assert parser.overflow
    assert parser.feed("more") == [] and parser.end(cut=False) == []
    long = f"<tool_call>{json.dumps({'name': 'f', 'arguments': {'x': 'y' * 100}})}"
    assert ToolParser.parse("hermes", 64, long) == (long, [])


def test_held_text_that_is_no_marker_goes_out() -> None:
    parser = ToolParser("llama3", LIMIT)
    assert parser.feed("  <|py") == []
    assert parser.feed("thon") == []  # still the start of <|python_tag|>
    assert parser.feed(" code") == [{"content": "  <|python code"}]
    assert parser.end(cut=False) == []
