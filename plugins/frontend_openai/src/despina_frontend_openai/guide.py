"""Guided decoding for a Python LLM model that exposes its logits step (xgrammar).

The contract is TensorRT-LLM's two request inputs, which the OpenAI frontend sends a
model that declares them: ``guided_decoding_guide_type`` (one of :data:`GUIDE_TYPES`)
and ``guided_decoding_guide`` (its text: a JSON schema, a regular expression, an EBNF
grammar; ignored for ``json``). The model builds one :class:`Guides` over its tokenizer
when it loads, asks it for a :class:`Guide` per request and, at each step, calls
``guide.mask(logits)`` before it samples and ``guide.accept(token)`` after (an end token
ends the generation instead). Tokens the grammar forbids next get ``-inf``; once the
grammar is complete only the tokenizer's end tokens remain, so an output that ends
before ``max_tokens`` parses. JSON schemas are held to compact JSON (no whitespace
between tokens, ``,`` and ``:`` alone) and to their listed properties unless the schema
allows more; as compact JSON has no control character, tokens holding one are never
allowed there (xgrammar's rule for a string with ``maxLength`` admits them, raw, which
no JSON parser reads). Needs the ``guided`` extra (xgrammar, which brings torch).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import torch
import xgrammar as xgr

#: The guide types (TensorRT-LLM's names): any JSON object or array, a JSON schema's
#: instances, a regular expression's matches, an EBNF grammar's sentences (root ``root``).
GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
#: Compiled grammars a :class:`Guides` keeps, the least recently used dropped first.
CACHE_SIZE = 64
#: xgrammar's ``[time] file:line: `` before its messages.
_LOCATION = re.compile(r"^\[[^\]]*\] \S+:\d+: (Check failed: .*? is false: )?")


def grammar(kind: str, text: str) -> xgr.Grammar:
    """The grammar of a guide of type ``kind`` with ``text``; ValueError saying why for an
    unknown type or a text that is no such guide (a schema xgrammar cannot follow too)."""
    if kind not in GUIDE_TYPES:
        raise ValueError(f"unknown guide type '{kind}': one of {', '.join(GUIDE_TYPES)}")
    try:
        if kind == "json":
            return xgr.Grammar.builtin_json_grammar()
        if kind == "json_schema":
            return xgr.Grammar.from_json_schema(text, any_whitespace=False, separators=(",", ":"))
        if kind == "regex":
            return xgr.Grammar.from_regex(text)
        return xgr.Grammar.from_ebnf(text)
    except (RuntimeError, ValueError, TypeError) as exc:
        reason = _LOCATION.sub("", str(exc).strip())
        raise ValueError(f"invalid {kind.replace('_', ' ')}: {reason}") from None


def _without_controls(info: xgr.TokenizerInfo, vocab_size: int) -> torch.Tensor:
    """xgrammar's bitmask (1 bit per token, 32 per int32) of the tokens whose bytes hold
    no control character (below 0x20); ids past the tokenizer's vocabulary are off."""
    allowed = np.zeros(-(-vocab_size // 32) * 32, dtype=np.uint64)
    for token, text in enumerate(info.decoded_vocab[:vocab_size]):
        allowed[token] = all(byte >= 0x20 for byte in text)
    words = (allowed.reshape(-1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=1)
    return torch.from_numpy(words.astype(np.uint32).view(np.int32)).view(1, -1)


class Guide:
    """One generation's grammar state. Not shared between generations or threads."""

    def __init__(
        self, compiled: xgr.CompiledGrammar, vocab_size: int, allowed: torch.Tensor | None
    ) -> None:
        """``allowed``: a bitmask every step's is narrowed to, or None."""
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._allowed = allowed

    def mask(self, logits: torch.Tensor) -> None:
        """Set, in place, the logits (1-D over the vocabulary, on the CPU) of every token
        the grammar forbids next to ``-inf``."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        if self._allowed is not None:
            self._bitmask &= self._allowed
        xgr.apply_token_bitmask_inplace(logits.view(1, -1), self._bitmask)

    def accept(self, token: int) -> None:
        """Advance past ``token``, sampled from masked logits; ValueError if the grammar
        forbids it (it was sampled without :meth:`mask`)."""
        if not self._matcher.accept_token(token):
            raise ValueError(f"token {token} does not follow the guide's grammar")


class Guides:
    """The guides of one tokenizer: grammars compiled against its vocabulary, cached by
    (type, text). Thread-safe."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        """``tokenizer``: a transformers tokenizer; ``vocab_size``: the logits' length
        (the model's vocabulary, which may pad the tokenizer's)."""
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self._vocab_size = vocab_size
        self._compact = _without_controls(info, vocab_size)
        self._compiled: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def guide(self, kind: str, text: str) -> Guide:
        """A fresh guide of type ``kind`` with ``text``; ValueError as :func:`grammar`."""
        key = (kind, text)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiler.compile_grammar(grammar(kind, text))
                self._compiled[key] = compiled
                if len(self._compiled) > CACHE_SIZE:
                    self._compiled.popitem(last=False)
            else:
                self._compiled.move_to_end(key)
        compact = self._compact if kind == "json_schema" else None
        return Guide(compiled, self._vocab_size, compact)
