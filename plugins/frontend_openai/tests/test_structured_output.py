"""Structured output through the real ``openai`` client against the example tiny_llm,
whose logits are masked by xgrammar (``guide.py``): ``response_format`` ``json_schema``
and ``json_object``, a named ``tool_choice``, streamed and not; and the 400s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

LLM, SCRIPTED = "tiny_llm", "scripted"
CHAT = [{"role": "user", "content": "Describe a pet."}]
#: Bounded schemas (lengths, ranges, enums), so that the random model ends them within
#: max_tokens; what each exercises: strings, integers and enums; nesting, arrays and
#: optional fields; numbers, booleans and null.
SCHEMAS: dict[str, dict[str, Any]] = {
    "pet": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
            "kind": {"enum": ["cat", "dog", "fish"]},
        },
        "required": ["name", "age", "kind"],
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 999},
            "items": {
                "type": "array",
                "items": {"enum": ["tea", "cake", "soup"]},
                "minItems": 1,
                "maxItems": 3,
            },
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 6}},
                "required": ["city"],
            },
            "note": {"type": "string", "maxLength": 4},
        },
        "required": ["id", "items", "address"],
    },
    "reading": {
        "type": "object",
        "properties": {
            "value": {"type": "number", "minimum": -10, "maximum": 10},
            "ok": {"type": "boolean"},
            "unit": {"type": "null"},
        },
        "required": ["value", "ok", "unit"],
    },
}
TOOL = {
    "type": "function",
    "function": {
        "name": "book_table",
        "description": "Book a table",
        "parameters": SCHEMAS["pet"],
    },
}


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=120) as client:
        yield client


def _format(schema: dict[str, Any]) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def _valid(text: str, schema: dict[str, Any]) -> Any:
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_schema_replies_parse_and_validate(
    client: openai.OpenAI, name: str, seed: int
) -> None:
    reply = client.chat.completions.create(
        model=LLM,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=96,
        seed=seed,
        response_format=_format(SCHEMAS[name]),
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    _valid(choice.message.content or "", SCHEMAS[name])


def test_streamed_json_schema_concatenates_to_a_valid_reply(client: openai.OpenAI) -> None:
    schema = SCHEMAS["order"]
    stream = client.chat.completions.create(
        model=LLM,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=96,
        seed=3,
        response_format=_format(schema),
        stream=True,
    )
    pieces, finish = [], None
    for chunk in stream:
        pieces.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop" and len([p for p in pieces if p]) > 1
    _valid("".join(pieces), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_take_response_format_as_vllm_does(client: openai.OpenAI, stream: bool) -> None:
    schema = SCHEMAS["pet"]
    reply = client.completions.create(
        model=LLM,
        prompt="A pet:",
        max_tokens=64,
        seed=4,
        stream=stream,
        extra_body={"response_format": _format(schema)},
    )
    chunks = reply if stream else [reply]
    text = "".join(c.choices[0].text for c in chunks)  # type: ignore[union-attr]
    _valid(text, schema)


def test_json_object_replies_are_objects(client: openai.OpenAI) -> None:
    """Any object: the random model may write strings past max_tokens, so only the
    replies that end are parsed; each begins as an object and at least one ends."""
    ended = 0
    for seed in range(4):
        reply = client.chat.completions.create(
            model=LLM,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=48,
            seed=seed,
            response_format={"type": "json_object"},
        )
        text = reply.choices[0].message.content or ""
        assert text.startswith("{")
        if reply.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict)
            ended += 1
    assert ended >= 1


@pytest.mark.parametrize("seed", [0, 5])
def test_a_named_tool_choice_returns_arguments_that_fit_its_parameters(
    client: openai.OpenAI, seed: int
) -> None:
    reply = client.chat.completions.create(
        model=LLM,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=96,
        seed=seed,
        tools=[TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "book_table"}},
    )
    calls = reply.choices[0].message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "book_table"  # type: ignore[union-attr]
    _valid(calls[0].function.arguments, SCHEMAS["pet"])  # type: ignore[union-attr]


def test_a_streamed_named_tool_call_concatenates_to_valid_arguments(
    client: openai.OpenAI,
) -> None:
    stream = client.chat.completions.create(
        model=LLM,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=96,
        seed=6,
        tools=[TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "book_table"}},
        stream=True,
    )
    names, arguments = [], ""
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.function is not None:
                names.append(call.function.name)
                arguments += call.function.arguments or ""
    assert [n for n in names if n] == ["book_table"]
    _valid(arguments, SCHEMAS["pet"])


def _refused(client: openai.OpenAI, **body: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(messages=CHAT, max_tokens=4, **body)
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    return caught.value


def test_bad_schemas_unguided_models_and_unknown_tools_answer_400(client: openai.OpenAI) -> None:
    bad = _refused(client, model=LLM, response_format=_format({"type": "nope"}))
    assert bad.param == "response_format" and 'Unsupported type "nope"' in bad.message
    bad = _refused(client, model=LLM, response_format={"type": "json_schema"})
    assert "response_format.json_schema is required" in bad.message
    broken_tool = {**TOOL, "function": {"name": "f", "parameters": {"type": 5}}}
    bad = _refused(client, model=LLM, tools=[broken_tool], tool_choice="required")
    assert bad.param == "tools" and "invalid json schema" in bad.message
    unguided = _refused(client, model=SCRIPTED, response_format={"type": "json_object"})
    assert "does not support guided decoding" in unguided.message
    unknown = _refused(
        client,
        model=LLM,
        tools=[TOOL],
        tool_choice={"type": "function", "function": {"name": "nope"}},
    )
    assert unknown.param == "tool_choice" and "'nope' has not been passed" in unknown.message


def test_a_named_tool_on_a_model_without_guides_goes_unguided(client: openai.OpenAI) -> None:
    """As in Triton: the scripted model takes no guide, and its reply is the call's
    arguments as it wrote them."""
    reply = client.chat.completions.create(
        model=SCRIPTED,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=3,
        tools=[TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "book_table"}},
    )
    calls = reply.choices[0].message.tool_calls or []
    assert calls[0].function.arguments == "one two three "  # type: ignore[union-attr]
