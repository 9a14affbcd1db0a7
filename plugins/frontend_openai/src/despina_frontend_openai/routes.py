"""The OpenAI endpoints: ``/v1/models[/{id}]``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``, model load/unload, ``/health/ready``,
``/metrics``, as framework-free routes (:class:`despina_frontend_http.Route`) that answer
every failure in OpenAI's error format and check ``--openai-restricted-api`` themselves,
so they are served alike on the OpenAI port and on the HTTP port. Streaming answers are
server-sent events ending ``data: [DONE]``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from despina import DespinaError, FrontendHost, InferenceResponse
from despina_frontend_http import Request, Response, Route, StreamResponse

from despina_frontend_openai import convert
from despina_frontend_openai.catalog import OWNED_BY, Catalog, Entry, Lora
from despina_frontend_openai.errors import JSON_HEADERS, OpenAIError
from despina_frontend_openai.generate import responses
from despina_frontend_openai.metrics import METRICS_PATH, Metrics
from despina_frontend_openai.options import OpenAIOptions, group_of
from despina_frontend_openai.schema import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    FunctionDef,
    NamedToolChoice,
    _Sampling,
    parse,
)
from despina_frontend_openai.structured import guided_schema
from despina_frontend_openai.tools import ToolParser

log = logging.getLogger("despina.openai")

Answer = Response | StreamResponse
Handler = Callable[[Request], Awaitable[Answer]]
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"
PROMETHEUS_HEADERS = {"Content-Type": "text/plain; charset=utf-8"}


@dataclass
class Context:
    host: FrontendHost
    options: OpenAIOptions
    catalog: Catalog
    metrics: Metrics


def _json(body: object, status: int = 200) -> Response:
    return Response(status, JSON_HEADERS, json.dumps(body).encode())


def _event(body: object) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _sse(events: AsyncGenerator[bytes, None]) -> StreamResponse:
    return StreamResponse(200, SSE_HEADERS, events)


async def _collect(
    source: AsyncIterator[InferenceResponse], usage: convert.Usage
) -> tuple[list[str], list[list[tuple[str, float]]]]:
    """Every text piece and per-token logprobs of a generation's responses, counting usage."""
    texts: list[str] = []
    tokens: list[list[tuple[str, float]]] = []
    async for response in source:
        usage.add(response)
        texts.append(convert.text_of(response))
        tokens += convert.logprobs_of(response)
    return texts, tokens


def _model_body(model_id: str, entry: Entry) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": entry.created, "owned_by": OWNED_BY}


def _check_sampling(body: _Sampling, entry: Entry, logprobs: bool) -> None:
    """Triton's refusals of what its OpenAI frontend does not support (400)."""
    if not entry.generates:
        raise OpenAIError(f"model '{entry.model.name}' does not generate text", param="model")
    if body.n is not None and body.n > 1:
        raise OpenAIError(
            f"Received n={body.n}, but only single choice (n=1) is currently supported", param="n"
        )
    if body.logit_bias is not None:
        raise OpenAIError("logit bias is not currently supported", param="logit_bias")
    if body.stream_options is not None and not body.stream:
        raise OpenAIError(
            "`stream_options` can only be used when `stream` is True", param="stream_options"
        )
    if logprobs and "return_logprobs" not in entry.inputs:
        raise OpenAIError(
            f"logprobs are not available: model '{entry.model.name}' takes no return_logprobs input",
            param="logprobs",
        )


def _finish(usage: convert.Usage, max_tokens: int) -> str:
    return "length" if usage.prompt is not None and usage.completion >= max_tokens else "stop"


def _completion_logprobs(tokens: list[list[tuple[str, float]]], offset: int) -> dict[str, Any]:
    offsets, at = [], offset
    for position in tokens:
        offsets.append(at)
        at += len(position[0][0])
    return {
        "tokens": [p[0][0] for p in tokens],
        "token_logprobs": [p[0][1] for p in tokens],
        "top_logprobs": [dict(p[1:]) for p in tokens],
        "text_offset": offsets,
    }


def _chat_logprobs(tokens: list[list[tuple[str, float]]]) -> dict[str, Any]:
    def item(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**item(*p[0]), "top_logprobs": [item(*t) for t in p[1:]]} for p in tokens]}


async def _first(source: AsyncIterator[Any]) -> Any:
    """The first response (an error raises before anything is sent), or None."""
    try:
        return await anext(source)
    except StopAsyncIteration:
        return None


def routes(ctx: Context, metrics_path: str = METRICS_PATH) -> list[Route]:
    """Every endpoint, the generation metrics at ``metrics_path``; each handler answers
    its failures as OpenAI's errors (:func:`_guarded`)."""
    host, options, catalog, metrics = ctx.host, ctx.options, ctx.catalog, ctx.metrics

    async def list_models(http: Request) -> Answer:
        data = [_model_body(i, e) for i, e in catalog.ids()]
        return _json({"object": "list", "data": data})

    async def retrieve_model(http: Request) -> Answer:
        wanted = http.params["model"]
        for model_id, entry in catalog.ids():
            if model_id == wanted:
                return _json(_model_body(model_id, entry))
        raise OpenAIError(f"Unknown model: {wanted}", 404, param="model", code="model_not_found")

    async def load_model(http: Request) -> Answer:
        name = http.params["model"]
        await host.load(name)
        return _json(_model_body(name, catalog.entry(name)))

    async def unload_model(http: Request) -> Answer:
        name = http.params["model"]
        await host.unload(name)
        return _json({"status": "success", "model": name})

    async def health(http: Request) -> Answer:
        return Response(200 if host.ready else 503)

    async def prometheus(http: Request) -> Answer:
        return Response(200, PROMETHEUS_HEADERS, metrics.render().encode())

    async def run(
        http: Request, entry: Entry, body: _Sampling, gen: convert.Generation, lora: Lora | None
    ) -> AsyncGenerator[Any, None]:
        request = convert.generation_request(entry, body, gen, lora)
        return responses(host, entry, request, http.connected, metrics, lora)

    async def completions(http: Request) -> Answer:
        body = parse(CompletionRequest, http.body)
        entry, lora = catalog.split(body.model)
        _check_sampling(body, entry, bool(body.logprobs))
        if body.suffix is not None:
            raise OpenAIError("suffix is not currently supported", param="suffix")
        if entry.vllm and "best_of" in body.model_fields_set:
            raise OpenAIError(
                "best_of is no longer supported in vLLM backend, removed from vLLM V1 engine",
                param="best_of",
            )
        if body.best_of is not None and body.best_of > 1:
            raise OpenAIError(
                f"Received best_of={body.best_of}, but only single choice (best_of=1) is "
                "currently supported",
                param="best_of",
            )
        if not isinstance(body.prompt, str):
            raise OpenAIError("only single string input is supported", param="prompt")
        if not body.prompt:
            raise OpenAIError("prompt must be non-empty", param="prompt")
        max_tokens = body.max_tokens or options.default_max_tokens
        schema = await guided_schema(entry, body, None)
        gen = convert.Generation(
            body.prompt, max_tokens, bool(body.stream), body.echo, body.logprobs or None, schema
        )
        source = await run(http, entry, body, gen, lora)
        head = {
            "id": f"cmpl-{uuid.uuid4()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.model,
            "system_fingerprint": None,
        }
        usage = convert.Usage()
        if not body.stream:
            texts, tokens = await _collect(source, usage)
            choice = {
                "index": 0,
                "text": "".join(texts),
                "logprobs": _completion_logprobs(tokens, 0) if gen.logprobs else None,
                "finish_reason": _finish(usage, max_tokens),
            }
            return _json({**head, "choices": [choice], "usage": usage.body()})
        first = await _first(source)

        async def events() -> AsyncGenerator[bytes, None]:
            offset = 0
            try:
                if first is not None:
                    async for response in _chain(first, source):
                        usage.add(response)
                        text = convert.text_of(response)
                        tokens = convert.logprobs_of(response)
                        logprobs = _completion_logprobs(tokens, offset) if gen.logprobs else None
                        offset += len(text)
                        choice = {
                            "index": 0,
                            "text": text,
                            "logprobs": logprobs,
                            "finish_reason": None,
                        }
                        yield _event({**head, "choices": [choice]})
                last = {
                    "index": 0,
                    "text": "",
                    "logprobs": None,
                    "finish_reason": _finish(usage, max_tokens),
                }
                yield _event({**head, "choices": [last]})
                if body.stream_options and body.stream_options.include_usage:
                    yield _event({**head, "choices": [], "usage": usage.body()})
            except OpenAIError as exc:  # mid-stream: the error is an event
                yield _event(exc.body())
            finally:
                await source.aclose()
            yield _DONE

        return _sse(events())

    async def chat(http: Request) -> Answer:
        body = parse(ChatRequest, http.body)
        entry, lora = catalog.split(body.model)
        _check_sampling(body, entry, bool(body.logprobs))
        if body.top_logprobs is not None and not body.logprobs:
            raise OpenAIError(
                "`top_logprobs` can only be used when `logprobs` is True", param="top_logprobs"
            )
        named = _named_tool(body)
        auto = _auto_tools(body, options)
        tokenizer = await catalog.tokenizer(entry)
        prompt = _render(tokenizer, body, options.chat_template)
        max_tokens = body.max_completion_tokens or body.max_tokens or options.default_max_tokens
        top = (body.top_logprobs or 0) if body.logprobs else None
        schema = await guided_schema(entry, body, named)
        gen = convert.Generation(prompt, max_tokens, bool(body.stream), None, top, schema)
        source = await run(http, entry, body, gen, lora)
        kind = options.tool_call_parser or ""
        parser = ToolParser(kind, options.max_tool_call_parse_bytes) if auto else None
        head = {
            "id": f"chatcmpl-{uuid.uuid4()}",
            "created": int(time.time()),
            "model": body.model,
            "system_fingerprint": None,
        }
        usage = convert.Usage()
        if not body.stream:
            texts, tokens = await _collect(source, usage)
            text = "".join(texts)
            reason = _finish(usage, max_tokens)
            message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": None}
            if named is not None:
                message["content"] = ""
                message["tool_calls"] = [_named_call(named.name, text)]
            elif auto:
                content, calls = ToolParser.parse(kind, options.max_tool_call_parse_bytes, text)
                if calls:
                    message.update(content=content, tool_calls=calls)
                    reason = "tool_calls"
            choice = {
                "index": 0,
                "message": message,
                "logprobs": _chat_logprobs(tokens) if top is not None else None,
                "finish_reason": reason,
            }
            return _json(
                {**head, "object": "chat.completion", "choices": [choice], "usage": usage.body()}
            )
        head["object"] = "chat.completion.chunk"

        def delta(d: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
            choice = {"index": 0, "delta": d, "logprobs": logprobs, "finish_reason": finish}
            return _event({**head, "choices": [choice]})

        first = await _first(source)

        async def events() -> AsyncGenerator[bytes, None]:
            finish: str | None = None
            try:
                yield delta({"role": "assistant", "content": ""})
                named_sent = False
                if first is not None:
                    async for response in _chain(first, source):
                        usage.add(response)
                        text = convert.text_of(response)
                        tokens = convert.logprobs_of(response)
                        logprobs = _chat_logprobs(tokens) if top is not None and tokens else None
                        if named is not None:
                            call = (
                                _named_call(named.name, text)
                                if not named_sent
                                else {"function": {"arguments": text}}
                            )
                            yield delta({"tool_calls": [{"index": 0, **call}]}, logprobs=logprobs)
                            named_sent = True
                            continue
                        if parser is None:
                            pieces = [{"content": text}] if text else []
                        else:
                            pieces = parser.feed(text)
                        for piece in pieces or ([{"content": ""}] if logprobs else []):
                            yield delta(piece, logprobs=logprobs)
                            logprobs = None
                        if parser is not None and _parse_ended(parser):
                            finish = "length"
                            break
                if parser is not None and finish is None:
                    cut = _finish(usage, max_tokens) == "length"
                    for piece in parser.end(cut):
                        yield delta(piece)
                    _parse_ended(parser)
                    finish = parser.finish_reason()
                yield delta({}, finish or _finish(usage, max_tokens))
                if body.stream_options and body.stream_options.include_usage:
                    yield _event({**head, "choices": [], "usage": usage.body()})
            except OpenAIError as exc:
                yield _event(exc.body())
            finally:
                await source.aclose()
            yield _DONE

        return _sse(events())

    async def embeddings(http: Request) -> Answer:
        body = parse(EmbeddingRequest, http.body)
        entry, _ = catalog.split(body.model)
        if not entry.embeds:
            raise OpenAIError(f"model '{entry.model.name}' does not embed text", param="model")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise OpenAIError(
                "input must be a non-empty string or list of non-empty strings", param="input"
            )

        async def one(text: str) -> tuple[list[float], int]:
            request = convert.embedding_request(entry, str(text), body.dimensions)
            usage = convert.Usage()
            answer = ""
            async for response in responses(host, entry, request, http.connected, metrics):
                answer += convert.text_of(response)
                usage.add(response)
            try:
                vector = [float(v) for v in json.loads(answer)]
            except (ValueError, TypeError):
                raise OpenAIError(
                    f"model '{entry.model.name}' answered no embedding", 500
                ) from None
            return vector, usage.prompt or 0

        results = await asyncio.gather(*(one(str(t)) for t in texts))
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
            for i, (v, _) in enumerate(results)
        ]
        tokens = sum(n for _, n in results)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json({"object": "list", "data": data, "model": body.model, "usage": usage})

    return [
        Route(method, path, _guarded(handler, options))
        for method, path, handler in (
            ("GET", "/v1/models", list_models),
            ("GET", "/v1/models/{model}", retrieve_model),
            ("POST", "/v1/models/{model}/load", load_model),
            ("POST", "/v1/models/{model}/unload", unload_model),
            ("POST", "/v1/completions", completions),
            ("POST", "/v1/chat/completions", chat),
            ("POST", "/v1/embeddings", embeddings),
            ("GET", "/health/ready", health),
            ("GET", metrics_path, prometheus),
        )
    ]


def _guarded(handler: Handler, options: OpenAIOptions) -> Handler:
    """``handler`` behind ``--openai-restricted-api`` (401 without the group's header),
    every failure answered as OpenAI's error JSON (500 for an unexpected one, logged)."""

    async def guarded(http: Request) -> Answer:
        try:
            group = group_of(http.method, http.decoded_path)
            rule = options.restrictions.get(group) if group else None
            if rule is not None and not rule.allows(http.headers.get(rule.header)):
                raise OpenAIError(
                    f"This API is restricted, expecting header '{rule.header}' with valid value",
                    401,
                    code="invalid_auth",
                )
            return await handler(http)
        except OpenAIError as exc:
            return exc.response()
        except DespinaError as exc:
            return OpenAIError.of(exc).response()
        except Exception:
            log.exception("OpenAI request %s %s failed", http.method, http.path)
            return OpenAIError("internal server error", 500).response()

    return guarded


async def _chain(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for item in rest:
        yield item


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(np.asarray(vector, np.float32).tobytes()).decode()


def _named_tool(body: ChatRequest) -> FunctionDef | None:
    """The function a request forces (named tool choice, or the first for "required");
    400 as Triton for a tool choice without tools or naming an unknown tool."""
    choice = body.tool_choice
    if choice not in (None, "none", "auto") and not body.tools:
        raise OpenAIError(
            "tool_choice requires CreateChatCompletionRequest.tools to be provided",
            param="tool_choice",
        )
    if isinstance(choice, NamedToolChoice):
        assert body.tools is not None
        tool = next(
            (t.function for t in body.tools if t.function.name == choice.function.name), None
        )
        if tool is None:
            raise OpenAIError(
                f"Tool '{choice.function.name}' has not been passed in `tools`.",
                param="tool_choice",
            )
        return tool
    if choice == "required":
        assert body.tools is not None
        return body.tools[0].function
    return None


def _auto_tools(body: ChatRequest, options: OpenAIOptions) -> bool:
    """Whether the reply is parsed for tool calls; 400 as Triton for tools without a
    ``--tool-call-parser``."""
    if not body.tools or body.tool_choice not in (None, "auto"):
        return False
    if options.tool_call_parser is None:
        if body.tool_choice == "auto":
            raise OpenAIError(
                '"auto" tool choice requires --tool-call-parser to be set', param="tool_choice"
            )
        raise OpenAIError(
            "having tools in the request requires --tool-call-parser to be set", param="tools"
        )
    return True


def _parse_ended(parser: ToolParser) -> bool:
    """True when the tool-call parser read its limit; OpenAIError (sent as the stream's
    error event) when an opened call broke (see tools.py's contract)."""
    if parser.broken is not None:
        raise OpenAIError(
            f"the model's tool call broke off mid-stream: {parser.broken}",
            500,
            code="tool_call_parse_error",
        )
    return parser.overflow


def _named_call(name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _render(tokenizer: Any, body: ChatRequest, template: str | None) -> str:
    """The chat's prompt from the tokenizer's chat template (``--chat-template`` instead
    when given); 400 for a conversation the template refuses."""
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    for message in messages:  # templates read tool call arguments as objects
        for call in message.get("tool_calls", []):
            with contextlib.suppress(ValueError):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    try:
        prompt = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template,
            add_generation_prompt=True,
            tokenize=False,
        )
    except (ValueError, TypeError, LookupError, DespinaError) as exc:
        raise OpenAIError(f"cannot apply the chat template: {exc}", param="messages") from None
    except Exception as exc:  # jinja2's TemplateError (jinja2 is imported by transformers)
        if type(exc).__module__.startswith("jinja2"):
            raise OpenAIError(f"cannot apply the chat template: {exc}", param="messages") from None
        raise
    return str(prompt)
