"""SageMaker multi-model endpoints, as tritonserver serves them: ``POST /models`` loads
the model SageMaker unpacked at ``<root>/<hash>/model`` by registering its folder as a
model repository (the model served under the target model's name), ``GET /models`` and
``GET /models/<hash>`` list what was loaded, ``DELETE /models/<hash>`` unloads it (and
what it composes) and forgets the folder."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from despina import AlreadyExists, DespinaError
from despina_frontend_http import Response, error_response, json_response

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.sagemaker")

_ENSEMBLE = re.compile(r'platform:(\s)*"ensemble"')
#: Folders a url may not name (tritonserver's check).
_SYSTEM = ("/dev/", "/proc/", "/sys/")


#: Texts that mark an error as out of memory (answered 507, tritonserver's list).
OOM_TEXTS = (
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
)


def is_oom(text: str) -> bool:
    """Whether an error text reads as out of memory (tritonserver's substring test)."""
    return any(marker in text for marker in OOM_TEXTS)


class MultiModel:
    """The models loaded through ``/models``: name (SageMaker's hash) -> the registered
    repository folder (the ``modelUrl`` listed)."""

    def __init__(self, host: FrontendHost, root: str) -> None:
        self.host = host
        self.root = root
        self.models: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._url = re.compile(
            rf"({re.escape(root.rstrip('/'))}/[0-9A-Za-z._]+)/(model)/?([0-9A-Za-z._]+)?"
        )

    def loaded(self, name: str) -> bool:
        return name in self.models

    def list(self) -> Response:
        """``{"models": [{"modelName", "modelUrl"}, ...]}``; a model not ready (version 1,
        by its listed name) is an empty object, as tritonserver lists it."""
        models: list[dict[str, str]] = []
        for name, url in self.models.items():
            ready = self.host.model_ready(name, "1")
            models.append({"modelName": name, "modelUrl": url} if ready else {})
        return json_response({"models": models})

    def get(self, name: str) -> Response:
        url = self.models.get(name)
        if url is None:
            return Response(404)
        return json_response({"modelName": name, "modelUrl": url})

    async def load(self, body: bytes, target_header: str | None) -> Response:
        """``POST /models`` with ``{"model_name": <hash>, "url": <folder>}``."""
        name = url = ""
        if body:
            try:
                request = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                return error_response(400, f"failed to parse the request JSON buffer: {exc}")
            if not isinstance(request, dict):
                return error_response(400, "the load model request must be a JSON object")
            for key in ("model_name", "url"):
                value = request.get(key, "")
                if not isinstance(value, str):
                    return error_response(400, f"Unable to parse '{key}': expected a string")
            name, url = request.get("model_name", ""), request.get("url", "")
        path = os.path.abspath(os.path.normpath(url)) if url else os.getcwd()
        if path.startswith(_SYSTEM):
            log.error(
                'Invalid URL: %s. "url" property value cannot start with /dev/, /proc/, or /sys/.',
                url,
            )
            return Response(400)
        target = target_header or name
        log.info("Loading SageMaker TargetModel: %s", target)
        async with self._lock:
            return await self._load(name, url, path, target)

    async def _load(self, name: str, url: str, path: str, target: str) -> Response:
        found = self._url.fullmatch(path)
        if found is None:
            return error_response(
                400,
                f"Invalid \"url\" '{url}': expected a path of the form "
                f"{self.root.rstrip('/')}/<hash>/model[/<subdir>]",
            )
        repository, subdir = found[1], found[2]
        if (Path(path) / "config.pbtxt").is_file():
            folder = subdir  # the model is the url's folder itself
        else:
            repository, folder = path, _model_folder(Path(path))
        try:
            self.host.register_model_repository(repository, {target: folder})
        except AlreadyExists as exc:
            return error_response(409, str(exc))
        except DespinaError as exc:
            return error_response(400, str(exc))
        try:
            await self.host.load(target)
        except DespinaError as exc:
            text = str(exc)
            with contextlib.suppress(DespinaError):  # its failed versions leave readiness
                await self.host.unload(target)
            try:
                self.host.unregister_model_repository(repository)
            except DespinaError as unregister:  # answered as tritonserver would
                return error_response(400, str(unregister))
            if isinstance(exc, AlreadyExists):
                return error_response(409, text)
            return error_response(507 if is_oom(text) else 400, text)
        self.models[name] = repository
        return Response(200)

    async def unload(self, name: str, target_header: str | None) -> Response:
        """``DELETE /models/<hash>``: unload it and what it composes, forget its folder."""
        async with self._lock:
            repository = self.models.get(name)
            if repository is None:
                log.info("Model %s is not loaded.", name)
                return Response(404)
            target = target_header or name
            log.info("Unloading SageMaker TargetModel: %s", target)
            try:
                await self.host.unload(target, unload_dependents=True)
            except DespinaError as exc:
                return error_response(400, str(exc))
            del self.models[name]
            try:
                self.host.unregister_model_repository(repository)
            except DespinaError as exc:
                return error_response(400, str(exc))
            return Response(200)


def _model_folder(path: Path) -> str:
    """The folder of ``path`` to load: the ensemble's when one of them is an ensemble,
    else the last one (tritonserver takes the last its directory listing gives; here in
    name order)."""
    chosen = ensemble = ""
    try:
        folders = sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return ""
    for folder in folders:
        chosen = folder.name
        try:
            text = (folder / "config.pbtxt").read_text(errors="replace")
        except OSError:
            continue
        if _ENSEMBLE.search(text):
            log.info("SageMaker front-end detected an Ensemble config at path: %s", folder)
            ensemble = folder.name
    return ensemble or chosen
