"""Streamed tool calls through the real ``openai`` client: the call's id and name first,
then its arguments in fragments as the scripted model generates them (7 characters a
response); a broken call ends the stream with an error; a cut one with ``length``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

SCRIPTED = "scripted"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ARGUMENTS = {"city": "Oslo", "days": [1, 2]}


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=60) as client:
        yield client


def _stream(client: openai.OpenAI, prompt: str, **kwargs: Any) -> list[Any]:
    return list(
        client.chat.completions.create(
            model=SCRIPTED,
            messages=[{"role": "user", "content": prompt}],
            tools=[WEATHER_TOOL],
            stream=True,
            **kwargs,
        )
    )


def _deltas(chunks: list[Any]) -> list[Any]:
    return [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]


def test_a_streamed_call_sends_its_name_first_then_argument_fragments(
    client: openai.OpenAI,
) -> None:
    chunks = _stream(client, "What is the weather in Oslo?")
    deltas = _deltas(chunks)
    head, rest = deltas[0], deltas[1:]
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather")
    assert head.id.startswith("call_") and head.function.arguments == ""
    assert len(rest) > 2  # arguments streamed as generated, not at the end
    assert all(d.id is None and d.function.name is None and d.index == 0 for d in rest)
    assert json.loads("".join(d.function.arguments for d in rest)) == ARGUMENTS
    assert "tool_call" not in "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_openai_stream_helper_rebuilds_the_call(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=SCRIPTED,
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=[WEATHER_TOOL],
    ) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in events
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == ARGUMENTS  # type: ignore[union-attr]
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_call_that_breaks_after_it_opened_ends_the_stream_with_an_error(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.APIError) as caught:
        _stream(client, "a broken call please")
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "tool_call_parse_error"
    assert "not valid JSON" in caught.value.body["message"]
    # the whole reply sent nothing yet: it is content
    reply = client.chat.completions.create(
        model=SCRIPTED,
        messages=[{"role": "user", "content": "a broken call please"}],
        tools=[WEATHER_TOOL],
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content.startswith("<tool_call>")  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "stop"


def test_a_call_cut_by_max_tokens_ends_with_length(client: openai.OpenAI) -> None:
    chunks = _stream(client, "What is the weather in Oslo?", max_tokens=8)
    deltas = _deltas(chunks)
    assert deltas[0].function.name == "get_weather"
    streamed = "".join(d.function.arguments or "" for d in deltas)
    assert streamed and json.dumps(ARGUMENTS).startswith(streamed)  # a JSON prefix
    assert chunks[-1].choices[0].finish_reason == "length"
    reply = client.chat.completions.create(
        model=SCRIPTED,
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=[WEATHER_TOOL],
        max_tokens=8,
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason == "length"


def test_mistral_calls_stream_with_nine_character_ids(forced_client: openai.OpenAI) -> None:
    deltas = _deltas(_stream(forced_client, "mistral: the weather in Oslo"))
    assert deltas[0].function.name == "get_weather"
    assert len(deltas[0].id) == 9 and deltas[0].id.isalnum()
    assert json.loads("".join(d.function.arguments for d in deltas[1:])) == ARGUMENTS
    reply = forced_client.chat.completions.create(
        model=SCRIPTED,
        messages=[{"role": "user", "content": "mistral: the weather in Oslo"}],
        tools=[WEATHER_TOOL],
    )
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert json.loads(call.function.arguments) == ARGUMENTS  # type: ignore[union-attr]
