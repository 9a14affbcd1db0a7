"""The OpenAI frontend's settings, read once from its flags (``despina_configure``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from despina import Restriction, StashKey

#: Endpoint groups of ``--openai-restricted-api`` -> the (method, path prefix) they cover,
#: as Triton's OpenAI frontend groups them.
GROUPS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "inference": (
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
    ),
    "model-repository": (("GET", "/v1/models"), ("POST", "/v1/models/")),
    "metrics": (("GET", "/metrics"),),
    "health": (("GET", "/health/ready"),),
}


@dataclass(frozen=True)
class OpenAIOptions:
    """``--allow-openai``, ``--openai-*`` and the generation flags, typed and checked."""

    allow: bool
    port: int
    #: ``--openai-on-http-port``: served on the HTTP port, with no port of its own.
    on_http_port: bool
    address: str
    tokenizer: Path | None
    chat_template: str | None
    default_max_tokens: int
    tool_call_parser: str | None
    max_tool_call_parse_bytes: int
    lora_separator: str | None
    #: ``--backend``: the request format forced on every model, or None (each model's).
    backend: str | None
    #: ``{group: Restriction}`` from ``--openai-restricted-api``.
    restrictions: Mapping[str, Restriction]
    max_input_size: int

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> OpenAIOptions:
        """Read and check the flags; ValueError naming the flag for a bad value."""
        for flag, value in (
            ("--default-max-tokens", flags.default_max_tokens),
            ("--max-tool-call-parse-bytes", flags.max_tool_call_parse_bytes),
            ("--openai-max-input-size", flags.openai_max_input_size),
        ):
            if value <= 0:
                raise ValueError(f"{flag} must be positive")
        template = None
        if flags.chat_template:
            try:
                template = Path(flags.chat_template).read_text()
            except OSError as exc:
                raise ValueError(f"--chat-template: cannot read {exc.filename}") from None
        tokenizer = Path(flags.tokenizer) if flags.tokenizer else None
        if tokenizer is not None and not tokenizer.is_dir():
            raise ValueError("--tokenizer must be a local folder holding a tokenizer")
        return cls(
            allow=bool(flags.allow_openai),
            port=int(flags.openai_port),
            on_http_port=bool(flags.openai_on_http_port),
            address=str(flags.openai_address),
            tokenizer=tokenizer,
            chat_template=template,
            default_max_tokens=int(flags.default_max_tokens),
            tool_call_parser=flags.tool_call_parser,
            max_tool_call_parse_bytes=int(flags.max_tool_call_parse_bytes),
            lora_separator=flags.lora_separator or None,
            backend=flags.backend,
            restrictions=parse_restrictions(flags.openai_restricted_api),
            max_input_size=int(flags.openai_max_input_size),
        )


def parse_restrictions(values: list[list[str]]) -> Mapping[str, Restriction]:
    """``{group: Restriction}`` from ``--openai-restricted-api APIS KEY VALUE`` values;
    ValueError (Triton's texts) for an unknown group or one named twice."""
    rules: dict[str, Restriction] = {}
    for apis, key, value in values:
        for api in apis.split(","):
            if api not in GROUPS:
                raise ValueError(f"Unknown API '{api}'. Available APIs: {list(GROUPS)}")
            if api in rules:
                raise ValueError(
                    f"restricted api '{api}' can not be specified in multiple config groups"
                )
            rules[api] = Restriction(key.lower(), value)
    return rules


def group_of(method: str, path: str) -> str | None:
    """The restricted group a request falls in (by method and path prefix), or None."""
    for group, endpoints in GROUPS.items():
        if any(method == m and path.startswith(p) for m, p in endpoints):
            return group
    return None


#: Where the OpenAI frontend's options live in the server's stash.
OPENAI_OPTIONS: StashKey[OpenAIOptions] = StashKey("despina-frontend-openai")
