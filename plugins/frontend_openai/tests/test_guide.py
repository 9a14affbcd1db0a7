"""The model's side of guided decoding (``despina_frontend_openai.guide``) on the example
tokenizer: each guide type's walks over random logits end in its language."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xgrammar")
transformers = pytest.importorskip("transformers")

from despina_frontend_openai.guide import Guides, grammar  # noqa: E402

VOCAB = 512


@pytest.fixture(scope="module")
def tokenizer(repository: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(repository / "tiny_llm" / "1")


@pytest.fixture(scope="module")
def guides(tokenizer: Any) -> Guides:
    return Guides(tokenizer, VOCAB)


def _walk(guides: Guides, tokenizer: Any, kind: str, text: str, seed: int) -> str:
    """The text of greedy steps over random logits under the guide, to the end token."""
    guide = guides.guide(kind, text)
    generator = torch.Generator().manual_seed(seed)
    tokens: list[int] = []
    for _ in range(200):
        logits = torch.randn(VOCAB, generator=generator)
        guide.mask(logits)
        token = int(torch.argmax(logits))
        if token == tokenizer.eos_token_id:
            return str(tokenizer.decode(tokens))
        guide.accept(token)
        tokens.append(token)
    raise AssertionError(f"no end within 200 tokens: {tokenizer.decode(tokens)!r}")


@pytest.mark.parametrize("seed", range(5))
def test_each_guide_type_ends_in_its_language(guides: Guides, tokenizer: Any, seed: int) -> None:
    assert re.fullmatch(r"[ab]{2,4}-\d", _walk(guides, tokenizer, "regex", r"[ab]{2,4}-\d", seed))
    ebnf = 'root ::= "yes" | "no" | "maybe"'
    assert _walk(guides, tokenizer, "ebnf_grammar", ebnf, seed) in ("yes", "no", "maybe")
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 6}, "n": {"type": "boolean"}},
        "required": ["s", "n"],
    }
    value = json.loads(_walk(guides, tokenizer, "json_schema", json.dumps(schema), seed))
    assert set(value) == {"s", "n"} and len(value["s"]) <= 6  # no raw control character


def test_a_token_the_grammar_forbids_is_refused(guides: Guides, tokenizer: Any) -> None:
    guide = guides.guide("regex", "[0-9]+")
    with pytest.raises(ValueError, match="does not follow"):
        guide.accept(tokenizer.convert_tokens_to_ids("a"))


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("xml", "", "unknown guide type 'xml'"),
        ("regex", "((", "invalid regex: "),
        ("ebnf_grammar", "root ::= ", "invalid ebnf grammar: "),
        ("json_schema", '{"type": "nope"}', 'invalid json schema: Unsupported type "nope"'),
    ],
)
def test_a_text_that_is_no_guide_says_why(kind: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        grammar(kind, text)
