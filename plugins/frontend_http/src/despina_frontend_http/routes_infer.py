"""``POST /v2/models/{m}[/versions/{v}]/infer``: the inference endpoint."""

from __future__ import annotations

from typing import Any

import numpy as np
from aiohttp import web
from despina.loader import ModelVersion

from despina_frontend_http.body import accepted_encoding, compress, read_body
from despina_frontend_http.classification import read_labels, top_k
from despina_frontend_http.context import Context, Route, versioned
from despina_frontend_http.decode import decode_request
from despina_frontend_http.encode import Classifier, encode_response

#: Binary responses with more bytes than this are written buffer by buffer (no join).
STREAM_BYTES = 1 << 20
_JSON_HEADERS = {"Content-Type": "application/json"}


def routes(ctx: Context) -> list[Route]:
    server = ctx.server
    shm = server.shared_memory
    limit = ctx.max_input_size
    models = server.models

    async def infer(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        name = info["model"]
        version = info.get("version", "")
        model = models.get(name, version)
        body = await read_body(request, limit)
        headers = request.headers
        req = decode_request(
            body, headers.get("Inference-Header-Content-Length"), name, version, shm
        )
        if ctx.forward is not None:
            _forward_headers(ctx, headers, req.parameters)
        response = await server.infer(req)
        header, blobs = encode_response(req, response, shm, _classifier(server, model))
        encoding = accepted_encoding(headers.get("Accept-Encoding"))
        if not blobs:
            if encoding is None:
                return web.Response(body=header, headers=_JSON_HEADERS)
            return await _compressed(ctx, [header], encoding, {"Content-Type": "application/json"})
        out_headers = {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        }
        parts = [header, *blobs]
        if encoding is not None:
            return await _compressed(ctx, parts, encoding, out_headers)
        total = sum(len(p) for p in parts)
        if total < STREAM_BYTES:
            return web.Response(body=b"".join(parts), headers=out_headers)
        stream = web.StreamResponse(headers=out_headers)
        stream.content_length = total
        await stream.prepare(request)
        for part in parts:
            await stream.write(part)
        await stream.write_eof()
        return stream

    return [("POST", path, "inference", infer) for path in versioned("/infer")]


async def _compressed(
    ctx: Context, parts: list[Any], encoding: str, headers: dict[str, str]
) -> web.Response:
    body = await compress(parts, encoding, ctx.executor)
    return web.Response(body=body, headers={**headers, "Content-Encoding": encoding})


def _forward_headers(ctx: Context, headers: Any, parameters: dict[str, Any]) -> None:
    assert ctx.forward is not None
    for key, value in headers.items():
        if ctx.forward.search(key):
            parameters.setdefault(key.lower(), value)


def _classifier(server: Any, model: ModelVersion) -> Classifier:
    """Classification for ``model``'s outputs, with labels from their label_filename."""

    def classify(output: str, array: np.ndarray, k: int) -> np.ndarray:
        config = model.config
        label_file = next((o.label_filename for o in config.output if o.name == output), "")
        entry = server.models.entries.get(model.name)
        labels = read_labels(entry.model_dir if entry else None, label_file)
        return top_k(array, k, config.max_batch_size > 0, labels)

    return classify
