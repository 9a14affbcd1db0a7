"""The models the OpenAI API serves: what each takes, its tokenizer, its LoRA adapters.

A model whose inputs include ``text_input`` generates: in vLLM's request format when it
also takes ``sampling_parameters`` (its config is the contract), else in the format
Triton's OpenAI frontend sends Python and TensorRT-LLM models; ``--backend`` forces one
format on every model, as Triton's. One with ``embedding_request`` embeds (vLLM's format).
An entry is built when a request first names the model version and rebuilt after it
reloads.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from despina import DespinaError, FrontendHost, ModelVersion, NotFound

from despina_frontend_openai.errors import OpenAIError, unknown_model
from despina_frontend_openai.options import OpenAIOptions

#: Input names that switch ``echo`` (Triton's OpenAI frontend looks for either).
ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")
#: The inputs of a model that can be guided (TensorRT-LLM's; see guide.py).
GUIDE_INPUTS = frozenset({"guided_decoding_guide_type", "guided_decoding_guide"})
#: What Triton's OpenAI frontend says a model is "owned by".
OWNED_BY = "Triton Inference Server"


@dataclass
class Lora:
    """One adapter of ``multi_lora.json``: its task id (1, 2, ... in the file's order) and
    folder; its weights go to the model once per model load (TensorRT-LLM's rule)."""

    name: str
    task_id: int
    folder: Path | None
    registered: bool = False

    def tensors(self) -> dict[str, np.ndarray]:
        """``lora_weights`` and ``lora_config`` from the adapter's ``.npy`` files."""
        assert self.folder is not None, "a vLLM adapter is sent by name"
        return {
            "lora_weights": np.load(self.folder / "model.lora_weights.npy"),
            "lora_config": np.load(self.folder / "model.lora_config.npy"),
        }


@dataclass
class Entry:
    """One served model version."""

    model: ModelVersion
    inputs: frozenset[str]
    folder: Path | None
    loras: dict[str, Lora]
    #: Whether requests take vLLM's format (``sampling_parameters`` JSON).
    vllm: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    tokenizer: Any = None

    @property
    def generates(self) -> bool:
        return "text_input" in self.inputs

    @property
    def embeds(self) -> bool:
        return "embedding_request" in self.inputs

    @property
    def guided(self) -> bool:
        """Whether generation can follow a grammar: vLLM's format carries it in
        ``sampling_parameters``; any other needs both guide inputs."""
        return self.vllm or self.inputs >= GUIDE_INPUTS

    @property
    def echo_input(self) -> str | None:
        return next((name for name in ECHO_INPUTS if name in self.inputs), None)


class Catalog:
    """Entries by model name, read through the frontend host."""

    def __init__(self, host: FrontendHost, options: OpenAIOptions, roots: tuple[str, ...]):
        self.host = host
        self.options = options
        self.roots = [Path(r) for r in roots if "://" not in r]
        self._entries: dict[str, Entry] = {}
        self._shared_tokenizer: Any = None
        self._lock = asyncio.Lock()

    def entry(self, name: str) -> Entry:
        """The entry of the version ``name`` runs on now; 404 for a model not served."""
        try:
            model = self.host.inference_model(name)
        except NotFound:
            raise unknown_model(name) from None
        except DespinaError as exc:
            raise OpenAIError.of(exc) from None
        entry = self._entries.get(name)
        if entry is None or entry.model is not model:
            entry = self._build(model)
            self._entries[name] = entry
        return entry

    def split(self, requested: str) -> tuple[Entry, Lora | None]:
        """The entry and adapter a request's ``model`` names (``<model><sep><adapter>``
        with ``--lora-separator``); 404 for an unknown model, 400 for an unknown adapter."""
        sep = self.options.lora_separator
        if sep and sep in requested:
            name, _, adapter = requested.partition(sep)
            entry = self.entry(name)
            lora = entry.loras.get(adapter)
            if lora is None:
                raise OpenAIError(f"Unknown LoRA: {adapter}; for model: {requested}", param="model")
            return entry, lora
        return self.entry(requested), None

    def ids(self) -> list[tuple[str, Entry]]:
        """Every ready model's OpenAI id (adapters as ``<model><sep><adapter>``)."""
        names = sorted({row["name"] for row in self.host.repository_index(ready_only=True)})
        listed: list[tuple[str, Entry]] = []
        for name in names:
            try:
                entry = self.entry(name)
            except OpenAIError:  # unloaded meanwhile
                continue
            listed.append((name, entry))
            if self.options.lora_separator:
                listed.extend(
                    (f"{name}{self.options.lora_separator}{a}", entry) for a in entry.loras
                )
        return listed

    async def tokenizer(self, entry: Entry) -> Any:
        """The tokenizer whose chat template a chat request uses: ``--tokenizer``, else
        the one in the model's version folder or model folder (loaded once, off the loop);
        500 when there is none."""
        async with self._lock:
            if self.options.tokenizer is not None:
                if self._shared_tokenizer is None:
                    self._shared_tokenizer = await asyncio.to_thread(_load, self.options.tokenizer)
                return self._shared_tokenizer
            if entry.tokenizer is None:
                folder = _tokenizer_folder(entry.folder)
                if folder is None:
                    raise OpenAIError(
                        f"model '{entry.model.name}' has no tokenizer in its folder (set "
                        "--tokenizer): its chat template is unknown",
                        500,
                    )
                entry.tokenizer = await asyncio.to_thread(_load, folder)
            return entry.tokenizer

    def _build(self, model: ModelVersion) -> Entry:
        folder = next(
            (
                root / model.name / str(model.version)
                for root in self.roots
                if (root / model.name / str(model.version)).is_dir()
            ),
            None,
        )
        inputs = frozenset(i.name for i in model.config.input)
        forced = self.options.backend
        vllm = forced == "vllm" if forced else "sampling_parameters" in inputs
        loras = _loras(folder, self.roots, vllm) if folder is not None else {}
        return Entry(model, inputs, folder, loras, vllm)


def _tokenizer_folder(version_folder: Path | None) -> Path | None:
    if version_folder is None:
        return None
    for candidate in (version_folder, version_folder.parent):
        if (candidate / "tokenizer_config.json").is_file():
            return candidate
    return None


def _load(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _loras(version_folder: Path, roots: list[Path], vllm: bool) -> dict[str, Lora]:
    """The adapters ``multi_lora.json`` lists; none when the file is absent or malformed.
    A vLLM model gets an adapter's name (its path is vLLM's business); otherwise the path
    is relative to the model repository and must stay inside it (Triton's rule)."""
    listing = version_folder / "multi_lora.json"
    if not listing.is_file():
        return {}
    root = next(r for r in roots if version_folder.is_relative_to(r)).resolve()
    try:
        items = json.loads(listing.read_text())
    except ValueError:
        return {}
    if not isinstance(items, dict):
        return {}
    if vllm:
        return {str(name): Lora(str(name), 0, None) for name in items}
    loras: dict[str, Lora] = {}
    for task_id, (name, relative) in enumerate(items.items(), start=1):
        path = Path(os.path.realpath(root / str(relative)))
        if Path(str(relative)).is_absolute() or not path.is_relative_to(root):
            continue  # as Triton: adapters live inside the repository
        loras[str(name)] = Lora(str(name), task_id, path)
    return loras
