"""The cost of structured output on the example tiny_llm (CPU), three ways:

1. libraries: compile time of a schema and cost per token (mask, apply, accept) on the
   example tokenizer's vocabulary, xgrammar and outlines-core (when installed:
   ``pip install outlines-core``), over guided random walks;
2. decode step: tiny_llm's forward pass and sampling per token, with and without
   ``despina_frontend_openai.Guides`` masking each step (in this process, one thread);
3. end to end: the interval between streamed tokens through the OpenAI API (the openai
   client; one token per chunk), with ``response_format`` json_schema and without.

    .venv/bin/python plugins/frontend_openai/bench/structured_output.py [--requests 12]

Builds the example repository in a temporary folder; prints Markdown tables.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import torch
from despina.testing import start_server
from ttft import build

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
            "id": {"type": "integer"},
            "status": {"enum": ["open", "paid", "shipped"]},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                    "required": ["sku", "qty"],
                },
            },
            "note": {"type": ["string", "null"]},
        },
        "required": ["id", "status", "items"],
    },
    "any object": {"type": "object"},
}
#: One guided step: masks ``logits`` in place, returns the chosen token, or None at the end.
Step = Callable[[torch.Tensor], int | None]


def _median_us(values: list[float]) -> str:
    return f"{1e6 * statistics.median(values):.1f}"


def walks(make: Callable[[], Step], vocab: int, runs: int = 20, steps: int = 64) -> list[float]:
    """Seconds per guided step over ``runs`` walks on random logits (seeds 0..runs-1)."""
    times: list[float] = []
    for seed in range(runs):
        step, generator = make(), torch.Generator().manual_seed(seed)
        for _ in range(steps):
            logits = torch.randn(vocab, generator=generator)
            start = time.perf_counter()
            token = step(logits)
            times.append(time.perf_counter() - start)
            if token is None:
                break
    return times


def xgrammar_rows(tokenizer: Any, vocab: int) -> list[str]:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    rows = []
    for name, schema in SCHEMAS.items():
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        start = time.perf_counter()
        compiled = compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=(",", ":")
        )
        compile_s = time.perf_counter() - start

        def make(compiled: Any = compiled) -> Step:
            matcher = xgr.GrammarMatcher(compiled)
            bitmask = xgr.allocate_token_bitmask(1, vocab)

            def step(logits: torch.Tensor) -> int | None:
                matcher.fill_next_token_bitmask(bitmask)
                xgr.apply_token_bitmask_inplace(logits.view(1, -1), bitmask)
                token = int(torch.argmax(logits))
                matcher.accept_token(token)
                return None if matcher.is_terminated() else token

            return step

        rows.append(
            f"| xgrammar | {name} | {1e3 * compile_s:.1f} | {_median_us(walks(make, vocab))} |"
        )
    return rows


def _byte_vocabulary(tokenizer: Any) -> dict[bytes, list[int]]:
    """Each ordinary token's bytes (GPT-2's byte-to-character map undone)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = printable + [256 + n for n in range(256 - len(printable))]
    order = printable + [b for b in range(256) if b not in printable]
    to_byte = {chr(c): b for c, b in zip(chars, order, strict=True)}
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    vocabulary: dict[bytes, list[int]] = {}
    for text, token in tokenizer.get_vocab().items():
        if token not in special:
            vocabulary.setdefault(bytes(to_byte[c] for c in text), []).append(token)
    return vocabulary


def outlines_rows(tokenizer: Any, vocab: int) -> list[str]:
    try:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError:
        return ["| outlines-core | (not installed) | | |"]
    vocabulary = outlines_core.Vocabulary(tokenizer.eos_token_id, _byte_vocabulary(tokenizer))
    shifts = torch.arange(32, dtype=torch.int32)
    rows = []
    for name, schema in SCHEMAS.items():
        start = time.perf_counter()
        index = outlines_core.Index(build_regex_from_schema(json.dumps(schema)), vocabulary)
        compile_s = time.perf_counter() - start

        def make(index: Any = index) -> Step:
            guide = outlines_core.Guide(index)
            bitmask = torch.zeros((1, (vocab + 31) // 32), dtype=torch.int32)

            def step(logits: torch.Tensor) -> int | None:
                guide.write_mask_into(bitmask.data_ptr(), bitmask.numel(), 4)
                allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().view(-1)[:vocab]
                logits.masked_fill_(~allowed, -torch.inf)
                token = int(torch.argmax(logits))
                if token == tokenizer.eos_token_id:
                    return None
                guide.advance(token)
                return None if guide.is_finished() else token

            return step

        rows.append(
            f"| outlines-core | {name} | {1e3 * compile_s:.1f} | {_median_us(walks(make, vocab))} |"
        )
    return rows


def decode_rows(folder: Path, runs: int) -> list[str]:
    """tiny_llm's decode step (forward with the KV cache, temperature-1 sampling) per
    token, unguided and guided by the "pet" schema, ``runs`` generations of each,
    alternating (so that the machine's load weighs on both alike); of a guided step, the
    guide's own part (mask and accept)."""
    from despina_frontend_openai import Guides
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder / "hf").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    guides = Guides(tokenizer, model.config.vocab_size)
    schema = json.dumps(SCHEMAS["pet"])
    prompt = torch.tensor([tokenizer.encode("A pet:")])

    def generate(seed: int, guided: bool) -> tuple[list[float], list[float]]:
        """Seconds per step, and the guide's seconds per step."""
        guide = guides.guide("json_schema", schema) if guided else None
        generator = torch.Generator().manual_seed(seed)
        inputs, past, steps, guiding = prompt, None, [], []
        for _ in range(64):
            start = time.perf_counter()
            out = model.model(input_ids=inputs, cache=past, use_cache=True)
            past = out.cache
            logits = model.lm_head(out.last_hidden_state[0, -1])
            masked = time.perf_counter()
            if guide is not None:
                guide.mask(logits)
            masked = time.perf_counter() - masked
            token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
            if token == tokenizer.eos_token_id:
                break
            accepted = time.perf_counter()
            if guide is not None:
                guide.accept(token)
            end = time.perf_counter()
            steps.append(end - start)
            guiding.append(masked + end - accepted)
            inputs = torch.tensor([[token]])
        return steps, guiding

    times: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    with torch.inference_mode():
        generate(0, True)  # compile and warm up
        for seed in range(runs):
            for guided in (False, True):
                steps, guiding = generate(seed, guided)
                times[guided][0].extend(steps)
                times[guided][1].extend(guiding)
    return [
        f"| {'json_schema (pet)' if guided else 'none'} | {len(steps)} | {_median_us(steps)} | "
        f"{_median_us(guiding) if guided else '-'} |"
        for guided, (steps, guiding) in times.items()
    ]


def http_rows(url: str, runs: int) -> list[str]:
    """Seconds between streamed tokens (the first token's wait, which holds the prompt's
    prefill, left out), streamed chat replies of at most 64 tokens, sequential, without
    and with response_format alternating (the first of each, which loads xgrammar and
    compiles, not counted)."""
    form = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMAS["pet"]}}
    bodies: dict[str, dict[str, Any]] = {"none": {}, "json_schema (pet)": {"response_format": form}}
    intervals: dict[str, list[float]] = {label: [] for label in bodies}
    with openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=120) as client:
        for seed in range(runs + 1):
            for label, extra in bodies.items():
                stream = client.chat.completions.create(
                    model="tiny_llm",
                    messages=[{"role": "user", "content": "Describe a pet."}],
                    max_tokens=64,
                    seed=seed,
                    stream=True,
                    extra_body=extra,
                )
                arrivals = [time.perf_counter() for c in stream if c.choices[0].delta.content]
                if seed:
                    intervals[label] += [b - a for a, b in itertools.pairwise(arrivals)]
    return [
        f"| {label} | {runs} | {len(intervals[label])} | {_median_us(intervals[label])} |"
        for label in bodies
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        folder = Path(tmp) / "tiny_llm" / "1"
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        print("| library | schema | compile ms | µs per token (mask, apply, accept), p50 |")
        print("| --- | --- | --- | --- |")
        print("\n".join(xgrammar_rows(tokenizer, 512) + outlines_rows(tokenizer, 512)))
        print("\n| guide | tokens | µs per decode step, p50 | of which the guide, p50 |")
        print("| --- | --- | --- | --- |")
        print("\n".join(decode_rows(folder, args.requests)))
        server = start_server(
            Path(tmp),
            [
                "--allow-openai=true",
                "--openai-port=0",
                "--openai-address=127.0.0.1",
                "--allow-grpc=false",
                "--http-address=127.0.0.1",
                "--metrics-address=127.0.0.1",
            ],
        )
        try:
            port = next(f.port for f in server.server.frontends if f.name == "openai")
            print("\n| response_format | requests | intervals | µs between tokens, p50 |")
            print("| --- | --- | --- | --- |")
            print("\n".join(http_rows(f"http://127.0.0.1:{port}/v1", args.requests)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
