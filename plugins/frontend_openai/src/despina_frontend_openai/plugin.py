"""Entry-point module: the OpenAI frontend's flags, class and routes for the HTTP port.
Cheap to import (no transformers)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from despina import hookimpl, triton_bool

if TYPE_CHECKING:
    from despina import FrontendHost, Stash

#: Triton's defaults: the OpenAI port, tokens generated when a request names no limit,
#: the bytes a streaming tool-call parser accepts, the largest request body (64 MiB).
DEFAULT_PORT = 9000
DEFAULT_MAX_TOKENS = 16
DEFAULT_MAX_TOOL_CALL_PARSE_BYTES = 128 * 1024
DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("OpenAI-compatible frontend (despina-frontend-openai)")
    group.add_argument(
        "--allow-openai",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve the OpenAI-compatible API (Despina; default: false, as tritonserver "
        "serves it only from its openai_frontend/main.py)",
    )
    group.add_argument(
        "--openai-port",
        type=int,
        default=DEFAULT_PORT,
        metavar="INT",
        help=f"OpenAI HTTP port (default: {DEFAULT_PORT})",
    )
    group.add_argument(
        "--openai-on-http-port",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve the OpenAI-compatible API on the HTTP port (--http-port) beside the v2 "
        "routes instead of on a port of its own; its generation metrics are then at "
        "/metrics/openai (Despina; default: false)",
    )
    group.add_argument(
        "--openai-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="OpenAI HTTP address to bind (Triton's --host; default: 0.0.0.0)",
    )
    group.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="local folder of a Hugging Face tokenizer used for every model's chat template "
        "(default: the tokenizer in each model's version folder, else its model folder)",
    )
    group.add_argument(
        "--chat-template",
        default=None,
        metavar="PATH",
        help="Jinja chat template file used instead of the tokenizer's",
    )
    group.add_argument(
        "--default-max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        metavar="INT",
        help=f"tokens generated when a request sets no limit (default: {DEFAULT_MAX_TOKENS})",
    )
    group.add_argument(
        "--tool-call-parser",
        default=None,
        choices=("llama3", "mistral", "hermes", "json"),
        help="parser of tool calls in generated text: llama3 ([<|python_tag|>]{...}; {...}), "
        "mistral ([TOOL_CALLS][{...}, ...]), hermes (<tool_call>{...}</tool_call>) or json "
        "(the reply starts with a call object or a list of them); default: none",
    )
    group.add_argument(
        "--max-tool-call-parse-bytes",
        type=int,
        default=DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
        metavar="BYTES",
        help="tool-call text the parser reads per request; past it the reply ends with "
        f"finish_reason 'length' and the generation is cancelled (default: "
        f"{DEFAULT_MAX_TOOL_CALL_PARSE_BYTES})",
    )
    group.add_argument(
        "--backend",
        default=None,
        choices=("vllm", "tensorrtllm"),
        help="request format for every generating model (Triton's --backend of its OpenAI "
        "frontend): vllm (text_input + sampling_parameters JSON) or tensorrtllm (one tensor "
        "per parameter); default: vllm for a model that takes sampling_parameters",
    )
    group.add_argument(
        "--lora-separator",
        default=None,
        metavar="STR",
        help="select a LoRA adapter (listed in the model's multi_lora.json) by the model name "
        "<model><separator><adapter> (default: none)",
    )
    group.add_argument(
        "--openai-restricted-api",
        nargs=3,
        action="append",
        default=[],
        metavar=("APIS", "KEY", "VALUE"),
        help="restrict endpoint groups (inference, model-repository, metrics, health; "
        "comma-separated) to requests carrying header KEY with VALUE; repeatable",
    )
    group.add_argument(
        "--openai-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest request body accepted (Triton's --http-max-input-size of its OpenAI "
        "frontend; default: 64 MiB)",
    )


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    from despina_frontend_openai.options import OPENAI_OPTIONS, OpenAIOptions

    stash[OPENAI_OPTIONS] = OpenAIOptions.from_namespace(settings)


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_openai.frontend import OpenAIFrontend

    return [OpenAIFrontend]


@hookimpl
def despina_http_routes(host: FrontendHost) -> list[Any]:
    from despina_frontend_openai.frontend import http_port_routes

    return http_port_routes(host)


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> None:
    """Refused with ``--serving-processes`` above 1: this frontend's port is not shared."""
    from despina import refuse_unshared_port

    refuse_unshared_port(
        flags.allow_openai and not flags.openai_on_http_port,
        "--allow-openai",
        count,
        "serve it on the HTTP port with --openai-on-http-port=true",
    )
