"""OpenAI requests as model inputs, and model responses as text, counts and logprobs.

Generation takes one of the two request formats of Triton's OpenAI frontend. vLLM's
(a model that takes ``sampling_parameters``, or ``--backend vllm``): ``text_input``,
``stream``, the echo switch, ``return_logprobs``, ``return_num_input_tokens``,
``return_num_output_tokens`` shaped ``[1]``, and ``sampling_parameters``, one JSON
string (``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``, the penalties,
``n``, ``min_tokens``, ``ignore_eos``, ``logprobs``, ``lora_name``). The one it sends
Python and TensorRT-LLM models: ``text_input``, ``stream``, ``max_tokens``,
``stop_words``, ``temperature``, ``top_p``, ``seed``, ``frequency_penalty``,
``presence_penalty``, the echo switch, ``lora_task_id`` with ``lora_weights``/
``lora_config`` the first time, ``return_num_input_tokens``, ``return_num_output_tokens``,
shaped ``[1, 1]``; Despina adds ``return_logprobs`` and ``top_logprobs``. Structured
output goes as ``structured_outputs`` in vLLM's ``sampling_parameters`` (the JSON string
``{"json": schema}``, as Triton's frontend sends it),
else as TensorRT-LLM's ``guided_decoding_guide_type`` (``json_schema``) and
``guided_decoding_guide`` (the schema). Only the inputs a model declares are sent. Answers are read from ``text_output``, ``num_input_tokens``,
``num_output_tokens`` and ``logprobs`` (vLLM's JSON: per token ``{token_id: {"logprob",
"rank", "decoded_token"}}``, the chosen first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from despina import InferenceRequest, InferenceResponse, to_host

from despina_frontend_openai.catalog import Entry, Lora
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.schema import _Sampling


def _one(value: Any, dtype: Any) -> np.ndarray:
    return np.array([[value]], dtype=dtype)


@dataclass(frozen=True)
class Generation:
    """What one generation asks of the model, protocol-independent."""

    prompt: str
    max_tokens: int
    stream: bool
    echo: bool | None = None
    #: Top logprobs per token (0: only the chosen token's), or None for no logprobs.
    logprobs: int | None = None
    #: The JSON schema (text) the output follows, or None for free text.
    schema: str | None = None


#: The request fields vLLM's ``sampling_parameters`` carries as they are.
VLLM_SAMPLING = frozenset(
    {
        "temperature",
        "top_p",
        "n",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "min_tokens",
        "ignore_eos",
    }
)


def generation_request(
    entry: Entry, body: _Sampling, gen: Generation, lora: Lora | None
) -> InferenceRequest:
    """The model's request for ``gen`` with ``body``'s sampling parameters, in the
    entry's format."""
    if body.seed is not None and body.seed < 0:
        raise OpenAIError("seed must be a non-negative integer", param="seed")
    values = (_vllm if entry.vllm else _tensorrtllm)(entry, body, gen, lora)
    inputs = {k: v for k, v in values.items() if k in entry.inputs}
    return InferenceRequest(model_name=entry.model.name, inputs=inputs)


def _vllm(entry: Entry, body: _Sampling, gen: Generation, lora: Lora | None) -> dict[str, Any]:
    params = body.model_dump(include=set(VLLM_SAMPLING), exclude_none=True)
    params["max_tokens"] = gen.max_tokens
    if gen.logprobs is not None:
        params["logprobs"] = gen.logprobs
    if lora is not None:
        params["lora_name"] = lora.name
    if gen.schema is not None:
        params["structured_outputs"] = json.dumps({"json": json.loads(gen.schema)})
    values = {
        "text_input": np.array([gen.prompt.encode()], dtype=object),
        "stream": np.array([gen.stream]),
        "sampling_parameters": np.array([json.dumps(params).encode()], dtype=object),
        "return_logprobs": np.array([gen.logprobs is not None]),
        "return_num_input_tokens": np.array([True]),
        "return_num_output_tokens": np.array([True]),
    }
    if entry.echo_input is not None:  # the prompt is left out unless echo is asked
        values[entry.echo_input] = np.array([not gen.echo])
    return values


def _tensorrtllm(
    entry: Entry, body: _Sampling, gen: Generation, lora: Lora | None
) -> dict[str, Any]:
    values: dict[str, np.ndarray] = {
        "text_input": _one(gen.prompt.encode(), object),
        "stream": _one(gen.stream, bool),
        "max_tokens": _one(gen.max_tokens, np.int32),
        "return_num_input_tokens": _one(True, bool),
        "return_num_output_tokens": _one(True, bool),
    }
    if body.stops:
        values["stop_words"] = np.array([[s.encode() for s in body.stops]], dtype=object)
    for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        value = getattr(body, name)
        if value is not None:
            values[name] = _one(value, np.float32)
    if body.seed is not None:
        values["seed"] = _one(body.seed, np.uint64)
    if gen.echo is not None and entry.echo_input is not None:
        values[entry.echo_input] = _one(not gen.echo, bool)
    if gen.logprobs is not None:
        values["return_logprobs"] = _one(True, bool)
        values["top_logprobs"] = _one(gen.logprobs, np.int32)
    if gen.schema is not None:
        values["guided_decoding_guide_type"] = _one(b"json_schema", object)
        values["guided_decoding_guide"] = _one(gen.schema.encode(), object)
    if lora is not None:
        values["lora_task_id"] = _one(lora.task_id, np.uint64)
        if not lora.registered:
            values.update(lora.tensors())
    return values


def embedding_request(entry: Entry, text: str, dimensions: int | None) -> InferenceRequest:
    """The model's request for one input text (vLLM's ``embedding_request`` JSON)."""
    pooling = {"dimensions": [dimensions]} if dimensions else {}
    blob = json.dumps({"input": text, "pooling_params": pooling}).encode()
    values = {
        "embedding_request": np.array([blob], dtype=object),
        "return_num_input_tokens": np.array([True]),
    }
    inputs = {k: v for k, v in values.items() if k in entry.inputs}
    return InferenceRequest(model_name=entry.model.name, inputs=inputs)


def text_of(response: InferenceResponse) -> str:
    """The response's ``text_output`` (its strings joined), "" without one."""
    array = response.outputs.get("text_output")
    if array is None:
        return ""
    return "".join(
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)
    )


def count_of(response: InferenceResponse, name: str) -> int | None:
    """``num_input_tokens`` / ``num_output_tokens`` of the response, if it has it."""
    array = response.outputs.get(name)
    return None if array is None or array.size == 0 else int(to_host(array).reshape(-1)[0])


def logprobs_of(response: InferenceResponse) -> list[list[tuple[str, float]]]:
    """Per generated token: (token, logprob) of the chosen token, then the top ones by
    rank; [] when the response carries none."""
    array = response.outputs.get("logprobs")
    if array is None or array.size == 0:
        return []
    raw = array.reshape(-1)[0]
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    tokens: list[list[tuple[str, float]]] = []
    for position in items or []:
        if not position:
            continue
        entries = list(position.values())
        chosen, rest = entries[0], sorted(entries, key=lambda e: e.get("rank", 1 << 30))
        tokens.append(
            [(chosen["decoded_token"], float(chosen["logprob"]))]
            + [(e["decoded_token"], float(e["logprob"])) for e in rest]
        )
    return tokens


class Usage:
    """Token counts over a request's responses: the prompt's from the first that has it,
    the completion's summed (streamed responses count their own tokens)."""

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion = 0

    def add(self, response: InferenceResponse) -> None:
        if self.prompt is None:
            self.prompt = count_of(response, "num_input_tokens")
        self.completion += count_of(response, "num_output_tokens") or 0

    def body(self) -> dict[str, int] | None:
        """OpenAI's ``usage``, or None when the model reports no counts."""
        if self.prompt is None:
            return None
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        }
