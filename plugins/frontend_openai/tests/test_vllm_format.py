"""vLLM's request format: a model that takes ``sampling_parameters`` gets ``text_input``
and the sampling parameters as one JSON string (shaped [1]), through the real ``openai``
client, streamed and not; Triton's ``--backend`` forces the other format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

VLLM = "vllm_echo"
SHAPES = {
    "text_input": [1],
    "stream": [1],
    "sampling_parameters": [1],
    "exclude_input_in_output": [1],
    "return_num_input_tokens": [1],
    "return_num_output_tokens": [1],
}


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=60) as client:
        yield client


def _guide(repository: Path) -> Any:
    """The ``structured_outputs`` of the last request, parsed."""
    return json.loads(_last(repository)["sampling"]["structured_outputs"])


def _last(repository: Path) -> dict[str, Any]:
    """What the model noted of the last request it got."""
    noted: dict[str, Any] = json.loads((repository / VLLM / "last_request.json").read_text())
    return noted


def test_a_completion_sends_the_sampling_parameters_as_one_json(
    client: openai.OpenAI, repository: Path
) -> None:
    reply = client.completions.create(
        model=VLLM,
        prompt="Tell me",
        max_tokens=8,
        temperature=0.5,
        top_p=0.9,
        seed=7,
        stop="delta",
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        extra_body={"min_tokens": 2, "ignore_eos": True},
    )
    assert reply.choices[0].text == "alpha beta gamma "  # cut before the stop string
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.prompt_tokens == 2
    noted = _last(repository)
    assert noted["inputs"] == SHAPES
    assert noted["sampling"] == {
        "max_tokens": 8,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
        "stop": "delta",
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "min_tokens": 2,
        "ignore_eos": True,
    }


def test_a_streamed_completion_honours_max_tokens_and_echo(
    client: openai.OpenAI, repository: Path
) -> None:
    chunks = list(
        client.completions.create(model=VLLM, prompt="Say", max_tokens=3, echo=True, stream=True)
    )
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert texts == ["Say", "alpha ", "beta ", "gamma "]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert _last(repository)["sampling"] == {"max_tokens": 3}


def test_chat_streamed_and_not_with_stop_words(client: openai.OpenAI, repository: Path) -> None:
    messages: Any = [{"role": "user", "content": "Hi"}]
    whole = client.chat.completions.create(
        model=VLLM, messages=messages, max_completion_tokens=6, stop=["epsilon", "zeta"]
    )
    assert whole.choices[0].message.content == "alpha beta gamma delta "
    assert _last(repository)["sampling"] == {"max_tokens": 6, "stop": ["epsilon", "zeta"]}
    chunks = list(
        client.chat.completions.create(
            model=VLLM,
            messages=messages,
            max_completion_tokens=6,
            stop=["epsilon", "zeta"],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert _last(repository)["inputs"]["exclude_input_in_output"] == [1]


def test_structured_output_goes_as_structured_outputs(
    client: openai.OpenAI, repository: Path
) -> None:
    """vLLM's ``structured_outputs``, a JSON string as Triton's frontend sends it (its vLLM
    backend builds StructuredOutputsParams of it): the schema of response_format, or of
    the forced tool's parameters."""
    pytest.importorskip("xgrammar")
    messages: Any = [{"role": "user", "content": "Hi"}]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    form: Any = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    client.chat.completions.create(
        model=VLLM, messages=messages, max_tokens=2, response_format=form
    )
    assert _guide(repository) == {"json": schema}
    client.completions.create(
        model=VLLM,
        prompt="x",
        max_tokens=2,
        extra_body={"response_format": {"type": "json_object"}},
    )
    assert _guide(repository) == {"json": {"type": "object"}}
    tool: Any = {"type": "function", "function": {"name": "f", "parameters": schema}}
    client.chat.completions.create(
        model=VLLM, messages=messages, max_tokens=2, tools=[tool], tool_choice="required"
    )
    assert _guide(repository) == {"json": schema}


def test_best_of_is_refused_for_vllm_as_triton_does(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="best_of is no longer supported"):
        client.completions.create(model=VLLM, prompt="x", best_of=1)


def test_backend_flag_forces_the_tensor_format(forced_client: openai.OpenAI) -> None:
    """``--backend tensorrtllm``: the vLLM model gets [1, 1] tensors, which its config
    refuses (400 naming the input), where it would otherwise answer."""
    with pytest.raises(openai.BadRequestError, match="text_input"):
        forced_client.completions.create(model=VLLM, prompt="Tell me", max_tokens=2)
    reply = forced_client.completions.create(model="scripted", prompt="count", max_tokens=2)
    assert reply.choices[0].text == "one two "
