"""tiny_llm: a decoupled Python model that generates text token by token with a KV cache.

Inputs are the ones Triton's OpenAI frontend sends a Python (TensorRT-LLM-format) model:
``text_input``, ``stream``, ``max_tokens``, ``stop_words``, ``temperature``, ``top_p``,
``seed``, ``frequency_penalty``, ``presence_penalty``, ``exclude_input_in_output``,
``lora_task_id`` (+ ``lora_weights`` / ``lora_config`` the first time an adapter is
used), ``return_num_input_tokens`` / ``return_num_output_tokens``; and Despina's
``return_logprobs`` / ``top_logprobs``; and TensorRT-LLM's ``guided_decoding_guide_type`` /
``guided_decoding_guide`` (structured output: each logits step is masked by the guide's
grammar, ``despina_frontend_openai.Guides``). Streaming sends one response per token (its text
delta); otherwise one response with the whole text. Then the final flag, alone. A
cancelled request (client gone) stops at the next token.

Each request generates on a thread of its own, so ``execute`` returns at once and
requests interleave; the weights are shared (read-only) between them.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer

#: Requests generating at once (more wait for a thread).
MAX_CONCURRENT = 8


@dataclass
class Params:
    """One request's inputs, read in ``execute``."""

    prompt: str
    stream: bool = False
    max_tokens: int = 16
    stop: list[str] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    echo: bool = False
    adapter: tuple[torch.Tensor, torch.Tensor] | None = None
    count_input: bool = False
    count_output: bool = False
    logprobs: int | None = None
    #: The grammar the output follows (despina_frontend_openai.Guide), or None.
    guide: Any = None


def _scalar(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        folder = Path(args["model_repository"]) / args["model_version"]
        self.model = AutoModelForCausalLM.from_pretrained(folder / "hf").eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.eos = self.tokenizer.eos_token_id
        self.adapters: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.guides: Any = None  # built on the first guided request (xgrammar is optional)
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(MAX_CONCURRENT, thread_name_prefix="tiny-llm")

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                params = self._params(request)
            except (ValueError, KeyError) as exc:
                error = pb_utils.TritonError(str(exc))
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            self.pool.submit(self._run, params, sender)
        return None

    def finalize(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _params(self, request: Any) -> Params:
        params = Params(prompt=_text(_scalar(request, "text_input")))
        stop = pb_utils.get_input_tensor_by_name(request, "stop_words")
        if stop is not None:
            params.stop = [_text(s) for s in stop.as_numpy().reshape(-1) if _text(s)]
        for name, kind in (
            ("stream", bool),
            ("max_tokens", int),
            ("temperature", float),
            ("top_p", float),
            ("seed", int),
            ("frequency_penalty", float),
            ("presence_penalty", float),
        ):
            value = _scalar(request, name)
            if value is not None:
                setattr(params, name, kind(value))
        echo_off = _scalar(request, "exclude_input_in_output")
        params.echo = echo_off is not None and not bool(echo_off)
        params.count_input = bool(_scalar(request, "return_num_input_tokens"))
        params.count_output = bool(_scalar(request, "return_num_output_tokens"))
        if _scalar(request, "return_logprobs"):
            top = _scalar(request, "top_logprobs")
            params.logprobs = 0 if top is None else int(top)
        kind = _scalar(request, "guided_decoding_guide_type")
        if kind is not None:
            guide = _scalar(request, "guided_decoding_guide")
            params.guide = self._guide(_text(kind), _text(b"" if guide is None else guide))
        task = _scalar(request, "lora_task_id")
        if task is not None:
            params.adapter = self._adapter(int(task), request)
        if params.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        return params

    def _guide(self, kind: str, text: str) -> Any:
        """A fresh guide for one request; ValueError for a guide that is none."""
        from despina_frontend_openai import Guides

        with self.lock:
            if self.guides is None:
                self.guides = Guides(self.tokenizer, self.model.config.vocab_size)
        return self.guides.guide(kind, text)

    def _adapter(self, task: int, request: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The adapter registered as ``task``, registering it when the request carries
        its weights (TensorRT-LLM's rule: weights the first time, the id after)."""
        weights = pb_utils.get_input_tensor_by_name(request, "lora_weights")
        config = pb_utils.get_input_tensor_by_name(request, "lora_config")
        with self.lock:
            if weights is not None and config is not None:
                rank, hidden, vocab = (int(v) for v in config.as_numpy().reshape(-1)[:3])
                flat = torch.from_numpy(weights.as_numpy().reshape(-1).astype(np.float32))
                down = flat[: rank * hidden].reshape(rank, hidden)
                up = flat[rank * hidden : rank * hidden + vocab * rank].reshape(vocab, rank)
                self.adapters[task] = (down, up)
            if task not in self.adapters:
                raise KeyError(f"LoRA task id {task} is not registered: send its weights")
            return self.adapters[task]

    def _run(self, params: Params, sender: Any) -> None:
        try:
            with torch.inference_mode():
                self._generate(params, sender)
        except Exception as exc:  # noqa: BLE001 - the client gets the error
            if not sender.is_cancelled():
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            return
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _next_token(
        self, params: Params, logits: torch.Tensor, generator: torch.Generator | None
    ) -> int:
        if params.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs, 1, generator=generator))

    def _logprob_entry(self, logprobs: torch.Tensor, token: int, top: int) -> dict[str, Any]:
        """vLLM's per-token logprobs entry: the chosen token first, then the top ones."""

        def entry(t: int) -> dict[str, Any]:
            value = float(logprobs[t])
            return {
                "logprob": value,
                "rank": int((logprobs > logprobs[t]).sum()) + 1,
                "decoded_token": self.tokenizer.decode([t]),
            }

        result = {str(token): entry(token)}
        for t in torch.topk(logprobs, top).indices.tolist() if top else []:
            result.setdefault(str(t), entry(t))
        return result

    def _generate(self, params: Params, sender: Any) -> None:
        prompt_ids = self.tokenizer.encode(params.prompt, add_special_tokens=False)
        if not prompt_ids:
            raise ValueError("the prompt has no tokens")
        generator = None
        if params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        counts = torch.zeros(self.model.config.vocab_size)
        inputs = torch.tensor([prompt_ids])
        past = None
        output_ids: list[int] = []
        text, sent = "", 0  # decoded text, and how much of it was sent
        pending: list[dict[str, Any]] = []  # logprobs of tokens not yet sent
        unsent_tokens = 0
        prefix = params.prompt if params.echo else ""
        for _ in range(params.max_tokens):
            if sender.is_cancelled():
                return
            out = self.model.model(input_ids=inputs, cache=past, use_cache=True)
            past = out.cache
            hidden = out.last_hidden_state[0, -1]
            logits = self.model.lm_head(hidden)
            if params.adapter is not None:
                down, up = params.adapter
                logits = logits + up @ (down @ hidden)
            logits = (
                logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0)
            )
            if params.guide is not None:
                params.guide.mask(logits)
            token = self._next_token(params, logits, generator)
            if token == self.eos:
                break
            if params.guide is not None:
                params.guide.accept(token)
            if params.logprobs is not None:
                logprobs = torch.log_softmax(logits, dim=-1)
                pending.append(self._logprob_entry(logprobs, token, params.logprobs))
            output_ids.append(token)
            unsent_tokens += 1
            counts[token] += 1
            text = self.tokenizer.decode(output_ids, skip_special_tokens=True)
            stopped = next((text.find(s) for s in params.stop if s in text), -1)
            if stopped >= 0:
                text = text[:stopped]
                break
            if params.stream and not text.endswith("\ufffd"):
                self._send(
                    sender, params, prefix + text[sent:], len(prompt_ids), unsent_tokens, pending
                )
                sent, prefix, unsent_tokens, pending = len(text), "", 0, []
            inputs = torch.tensor([[token]])
        if params.stream:
            if unsent_tokens or text[sent:] or prefix:
                self._send(
                    sender, params, prefix + text[sent:], len(prompt_ids), unsent_tokens, pending
                )
            return
        self._send(sender, params, prefix + text, len(prompt_ids), len(output_ids), pending)

    def _send(
        self,
        sender: Any,
        params: Params,
        text: str,
        num_input: int,
        num_output: int,
        logprobs: list[dict[str, Any]],
    ) -> None:
        outputs = [pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=object))]
        if params.count_input:
            outputs.append(pb_utils.Tensor("num_input_tokens", np.array([num_input], np.uint32)))
        if params.count_output:
            outputs.append(pb_utils.Tensor("num_output_tokens", np.array([num_output], np.uint32)))
        if params.logprobs is not None:
            blob = json.dumps(logprobs).encode()
            outputs.append(pb_utils.Tensor("logprobs", np.array([blob], dtype=object)))
        sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
