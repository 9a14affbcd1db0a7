"""The OpenAI-compatible frontend through the real ``openai`` client (sync and async),
against the example models built from examples/llm and a scripted decoupled model."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from despina.testing import RunningServer

LLM, EMBED, SCRIPTED = "tiny_llm", "tiny_embed", "scripted"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=60) as client:
        yield client


def test_models_lists_every_ready_model_and_its_adapters(client: openai.OpenAI) -> None:
    ids = sorted(m.id for m in client.models.list())
    assert ids == [SCRIPTED, EMBED, LLM, f"{LLM}_lora_chatty", f"{LLM}_lora_terse", "vllm_echo"]
    model = client.models.retrieve(LLM)
    assert (model.id, model.object, model.owned_by) == (LLM, "model", "Triton Inference Server")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_completion_counts_tokens_and_stops_at_max_tokens(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=LLM, prompt="The harbour town", max_tokens=5, temperature=0
    )
    again = client.completions.create(
        model=LLM, prompt="The harbour town", max_tokens=5, temperature=0
    )
    assert reply.choices[0].text == again.choices[0].text  # greedy: the same text
    assert reply.usage is not None and reply.usage.completion_tokens <= 5
    assert reply.usage.prompt_tokens > 0
    assert reply.choices[0].finish_reason in ("length", "stop")
    if reply.usage.completion_tokens == 5:
        assert reply.choices[0].finish_reason == "length"


def test_completion_echo_and_logprobs(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=LLM, prompt="Hello", max_tokens=3, temperature=0, echo=True, logprobs=2
    )
    choice = reply.choices[0]
    assert choice.text.startswith("Hello")
    assert choice.logprobs is not None and choice.logprobs.token_logprobs
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)
    assert choice.logprobs.top_logprobs is not None
    assert all(len(top) >= 1 for top in choice.logprobs.top_logprobs)


def test_completion_echo_streamed_and_not(client: openai.OpenAI) -> None:
    """``echo`` (Triton 2.64+) sets the model's ``exclude_input_in_output`` to its negation:
    the model puts the prompt before the completion, in the first delta when streamed."""
    prompt = "Hello there"

    def whole(echo: bool) -> str:
        reply = client.completions.create(
            model=LLM, prompt=prompt, max_tokens=4, temperature=0, echo=echo
        )
        return reply.choices[0].text

    plain = whole(False)
    assert plain and not plain.startswith(prompt)
    assert whole(True) == prompt + plain
    chunks = client.completions.create(
        model=LLM, prompt=prompt, max_tokens=4, temperature=0, echo=True, stream=True
    )
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert texts[0].startswith(prompt) and "".join(texts) == prompt + plain


def test_streamed_chat_matches_the_whole_reply_and_reports_usage(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    whole = client.chat.completions.create(
        model=LLM, messages=messages, max_tokens=8, temperature=0
    )
    chunks = list(
        client.chat.completions.create(
            model=LLM,
            messages=messages,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason


def test_chat_logprobs(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=LLM,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and all(len(t.top_logprobs) >= 3 for t in content)
    assert content[0].top_logprobs[0].logprob >= content[0].top_logprobs[-1].logprob


def test_lora_adapter_named_in_the_model_changes_the_output(client: openai.OpenAI) -> None:
    def text(model: str) -> str:
        reply = client.completions.create(
            model=model, prompt="Good morning", max_tokens=6, temperature=0
        )
        assert reply.model == model
        return reply.choices[0].text

    base, terse = text(LLM), text(f"{LLM}_lora_terse")
    assert text(f"{LLM}_lora_terse") == terse  # registered once, then by its task id
    assert text(f"{LLM}_lora_chatty") != terse or base != terse
    with pytest.raises(openai.BadRequestError, match="Unknown LoRA"):
        text(f"{LLM}_lora_nope")


def test_embeddings_float_base64_and_dimensions(client: openai.OpenAI) -> None:
    reply = client.embeddings.create(model=EMBED, input=["a quiet harbour", "the station"])
    assert [d.index for d in reply.data] == [0, 1]
    vector = np.array(reply.data[0].embedding)
    assert vector.shape == (64,) and abs(np.linalg.norm(vector) - 1) < 1e-4
    assert reply.usage.prompt_tokens > 0
    short = client.embeddings.create(model=EMBED, input="a quiet harbour", dimensions=8)
    assert len(short.data[0].embedding) == 8
    raw = client.embeddings.create(model=EMBED, input="a quiet harbour", encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(str(raw.data[0].embedding)), np.float32)
    assert np.allclose(decoded, vector, atol=1e-6)


def test_chat_with_a_tool_call_streamed_and_not(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    reply = client.chat.completions.create(model=SCRIPTED, messages=messages, tools=[WEATHER_TOOL])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo", "days": [1, 2]}
    # the tool's answer goes back into the conversation through the chat template
    follow = [
        *messages,
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "mild"},
    ]
    assert client.chat.completions.create(model=SCRIPTED, messages=follow, tools=[WEATHER_TOOL])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": LLM, "prompt": "x", "n": 2}, "only single choice"),
        ({"model": LLM, "prompt": "x", "temperature": 5}, "temperature"),
        ({"model": LLM, "prompt": "", "max_tokens": 1}, "prompt must be non-empty"),
        ({"model": LLM, "prompt": "x", "logit_bias": {"1": 1}}, "logit bias"),
        ({"model": EMBED, "prompt": "x"}, "does not generate"),
        ({"model": SCRIPTED, "prompt": "x", "logprobs": 1}, "logprobs are not available"),
    ],
)
def test_bad_completions_get_400_with_openai_error_json(
    client: openai.OpenAI, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=match) as caught:
        client.completions.create(**kwargs)  # type: ignore[call-overload]
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"


def test_bad_bodies_and_unknown_models(base_url: str, client: openai.OpenAI) -> None:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(
            model=LLM, messages=[{"role": "user", "content": "x"}], tool_choice="required"
        )


def test_restricted_metrics_need_their_header(base_url: str) -> None:
    root = base_url.removesuffix("/v1")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{root}/metrics", timeout=10)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["code"] == "invalid_auth"
    request = urllib.request.Request(f"{root}/metrics", headers={"admin-key": "secret"})
    text = urllib.request.urlopen(request, timeout=10).read().decode()
    assert 'despina_openai_time_to_first_token_ms_count{model="tiny_llm"}' in text
    assert 'despina_openai_output_tokens_total{model="tiny_llm"}' in text


def test_async_client_streams_concurrently(base_url: str) -> None:
    async def main() -> list[str]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)

        async def one(i: int) -> str:
            stream = await client.completions.create(
                model=SCRIPTED, prompt=f"count {i}", max_tokens=4, stream=True
            )
            return "".join([c.choices[0].text async for c in stream if c.choices])

        try:
            return await asyncio.gather(*(one(i) for i in range(4)))
        finally:
            await client.close()

    assert asyncio.run(main()) == ["one two three four "] * 4


def test_a_client_that_disconnects_mid_stream_cancels_the_generation(
    client: openai.OpenAI, repository: Path, server: RunningServer
) -> None:
    log = repository / SCRIPTED / "cancelled.log"
    log.unlink(missing_ok=True)
    stream = client.completions.create(model=SCRIPTED, prompt="count", max_tokens=100, stream=True)
    first = [next(iter(stream)) for _ in range(2)]
    assert first[0].choices[0].text == "one "
    stream.close()
    deadline = time.monotonic() + 10
    while not log.exists():
        assert time.monotonic() < deadline, "the model never saw the cancellation"
        time.sleep(0.05)
    # the server still serves
    assert client.completions.create(model=SCRIPTED, prompt="x", max_tokens=2).choices[0].text


def test_time_to_first_token_reaches_tritons_first_response_histogram(
    client: openai.OpenAI, server: RunningServer
) -> None:
    """A streamed completion is one decoupled request: the core records its first
    response in nv_inference_first_response_histogram_ms (histogram_latencies on)."""

    def count() -> float:
        with urllib.request.urlopen(server.metrics_url) as response:
            text = response.read().decode()
        prefix = 'nv_inference_first_response_histogram_ms_count{model="tiny_llm",version="1"}'
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))

    before = count()
    stream = client.completions.create(model=LLM, prompt="The harbour", max_tokens=4, stream=True)
    assert any(chunk.choices and chunk.choices[0].text for chunk in stream)
    assert count() == before + 1


def test_unserved_paths_get_openai_errors_and_no_v2_route(base_url: str) -> None:
    root = base_url.removesuffix("/v1")
    for method, path, status, message in (
        ("GET", "/v1/nothing", 404, "Not Found"),
        ("GET", "/v1/completions", 405, "Method Not Allowed"),
        ("POST", "/v2/models/tiny_llm/infer", 404, "Not Found"),
    ):
        request = urllib.request.Request(f"{root}{path}", data=b"{}" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == status
        assert json.loads(caught.value.read())["error"]["message"] == message
