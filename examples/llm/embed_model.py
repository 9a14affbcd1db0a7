"""tiny_embed: an embedding model, the mean of a tiny BERT encoder's last hidden states.

Takes vLLM's embedding request, as Triton's OpenAI frontend sends it:
``embedding_request`` = JSON ``{"input": str | [str], "pooling_params": {"dimensions":
[d]}}``; answers ``text_output`` = the JSON list of floats (one input) or list of lists,
L2-normalised (cut to ``d`` dimensions first when given), and ``num_input_tokens``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModel, AutoTokenizer


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        folder = Path(args["model_repository"]) / args["model_version"]
        self.model = AutoModel.from_pretrained(folder / "hf").eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        raw = pb_utils.get_input_tensor_by_name(request, "embedding_request").as_numpy()
        try:
            body = json.loads(raw.reshape(-1)[0])
            texts = body["input"]
            single = isinstance(texts, str)
            texts = [texts] if single else list(texts)
            dims = (body.get("pooling_params") or {}).get("dimensions") or [None]
        except (ValueError, KeyError, TypeError) as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad request: {exc}"))
        batch = self.tokenizer(texts, return_tensors="pt", padding=True)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        if dims[0]:
            pooled = pooled[:, : int(dims[0])]
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        vectors = pooled.tolist()
        text = json.dumps(vectors[0] if single else vectors).encode()
        tokens = int(batch["attention_mask"].sum())
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([text], dtype=object)),
                pb_utils.Tensor("num_input_tokens", np.array([tokens], np.uint32)),
            ]
        )
