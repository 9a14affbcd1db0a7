"""The server's handle on one child process (one incarnation of an instance).

:func:`spawn` starts ``python -m despina_backend_python.model_process.stub`` with one end of a socket
pair and sends the first message. :class:`ChildProcess` then reads everything the child
sends: ``executed`` replies complete ``execute`` calls, ``send`` messages go to the
requests' streams, BLS / metrics / log / model-control calls are served through the
:class:`~.model_host.ServerRuntime`. When the channel ends, every call waiting on
this child fails with ``ChildDied`` and ``on_exit`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from despina import InferenceRequest as CoreRequest, claim_shm

from despina_backend_python.pb.errors import TritonError, TritonModelException
from despina_backend_python.pb.messages import InferenceResponse, ParentTrace
from despina_backend_python.server import pb_convert
from despina_backend_python.server.model_host import ServerRuntime
from despina_backend_python.wire import channel, cuda_ipc, pb_codec
from despina_backend_python.wire.shm import (
    LINKED_OP,
    SHM_DIR,
    Arena,
    PoolExhausted,
    Ring,
    cleanup,
    set_link_handler,
)

#: The folder holding this package, put on the child's PYTHONPATH.
_SRC = str(Path(__file__).resolve().parents[2])


class ChildDied(Exception):
    """The child process ended while a call was waiting on it."""


async def spawn(
    python: str,
    env: dict[str, str],
    hello: dict[str, Any],
    host: ServerRuntime,
    on_exit: Callable[[ChildProcess], None],
) -> tuple[ChildProcess, dict[str, Any]]:
    """Start a stub with ``python``, send ``hello`` (with ``prefix`` and a unique ``tag``),
    and return it with its answer (``ready``, ``config`` or ``error``); the model's calls
    are served meanwhile. The two rings are created here and unlinked once the child has
    mapped them; their identities (and those of the child's segments found hard-linked)
    stay refused to clients for the server's life (:func:`despina.claim_shm`).

    Raises ChildDied when the process exits before answering.
    """
    set_link_handler(claim_shm)
    stem = f"{hello['prefix']}/{hello['tag']}"
    to_child, from_child = Ring(stem + "p_ring", create=True), Ring(stem + "c_ring", create=True)
    claim_shm(to_child.identity)
    claim_shm(from_child.identity)
    hello = dict(hello, rings=[to_child.name, from_child.name])
    arena = Arena(hello["prefix"], hello["tag"] + "p", to_child)
    ours, theirs = socket.socketpair()
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_SRC, env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))) if p
    )
    try:
        process = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "despina_backend_python.model_process.stub",
            str(theirs.fileno()),
            pass_fds=(theirs.fileno(),),
            env=full_env,
            stdin=asyncio.subprocess.DEVNULL,
        )
    finally:
        theirs.close()
    loop = asyncio.get_running_loop()
    _, child = await loop.create_unix_connection(
        lambda: ChildProcess(process, host, arena, from_child, on_exit), sock=ours
    )
    child.send(hello)
    try:
        return child, await child.answer
    finally:
        child.unlink_rings()


class ChildProcess(asyncio.Protocol):
    """A started child; serves its messages (as they arrive, in the protocol's
    ``data_received``) until the channel closes."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        host: ServerRuntime,
        arena: Arena,
        incoming: Ring,
        on_exit: Callable[[ChildProcess], None],
    ) -> None:
        self.process = process
        self.pid = process.pid
        self.transport: asyncio.Transport | None = None
        self.frames = channel.FrameBuffer()
        self.host = host
        self.arena = arena
        self.incoming = incoming
        self.on_exit = on_exit
        self.executions: dict[int, asyncio.Future[dict[str, Any]]] = {}
        #: Requests whose responses the child still sends: token -> (request, the outputs
        #: execute was told it asks for; a response sends no others).
        self.open: dict[int, tuple[CoreRequest, list[str]]] = {}
        #: Kept: asking for the running loop costs a getpid() call per execution.
        self.loop = asyncio.get_running_loop()
        #: The answer to the first message.
        self.answer: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.finalized: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.alive = True
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Set once the channel closed and everything waiting on this child failed.
        self.ended = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; uvloop's (Ray Serve replicas) is not an asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for message in self.frames.feed(data):
            try:
                self._dispatch(message)
            except Exception:
                self.host.logger.exception("bad message from the model process")

    def connection_lost(self, exc: Exception | None) -> None:
        self._spawn_task(self._ended())

    def send(self, message: dict[str, Any]) -> None:
        if self.alive and self.transport is not None:
            self.transport.write(channel.encode(message))

    def unlink_rings(self) -> None:
        for ring in (self.arena.ring, self.incoming):
            if ring is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(SHM_DIR, ring.name))

    def execute(self, exec_id: int, message: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Send an ``execute`` (or ``is_ready``) message; the future completes with its
        answer, ``executed`` (or ``readiness``)."""
        if not self.alive:
            raise ChildDied("the model process is not running")
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.executions[exec_id] = future
        self.send(message)
        return future

    def _dispatch(self, message: dict[str, Any]) -> None:
        try:
            self._handle(message)
        finally:  # read: the child may free the device tensors it sent (if any)
            if (done := cuda_ipc.done_message(message)) is not None:
                self.send(done)

    def _handle(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == cuda_ipc.DONE_OP:
            self.arena.exports.release(message["key"])
        elif op == LINKED_OP:  # a segment of ours the child found named elsewhere
            dev, ino = message["identity"]
            claim_shm((int(dev), int(ino)))
        elif op in ("executed", "readiness"):
            if "responses" in message:  # copied out now, in order (frees the ring)
                message["unpacked"] = pb_convert.responses_from_wire(message, self.incoming)
            future = self.executions.pop(message["id"], None)
            if future is not None and not future.done():
                future.set_result(message)
        elif op == "send":
            self._deliver(message)
        elif op in ("bls", "bls_stream"):
            request = pb_codec.unpack_request(message, self.incoming)  # in order: frees the ring
            if isinstance(parent := request.trace(), ParentTrace):  # the caller's trace
                entry = self.open.get(parent.token)
                request._trace = entry[0].trace if entry is not None else None
            self._spawn_task(self._serve_bls(op, message["id"], request))
        elif op == "log":
            self.host.log(message["level"], message["message"])
        elif op in ("ready", "config", "error"):
            if not self.answer.done():
                self.answer.set_result(message)
        elif op == "finalized":
            if not self.finalized.done():
                self.finalized.set_result(message)
        else:
            self._spawn_task(self._serve(op, message))

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _deliver(self, message: dict[str, Any]) -> None:
        final = bool(message["final"])
        entry = self.open.pop(message["token"]) if final else self.open.get(message["token"])
        if entry is None:
            return
        request, outputs = entry
        stream = request.stream
        if stream is None:
            return
        items = pb_convert.responses_from_wire(message, self.incoming)
        item = items[0] if items else None
        if item is None:
            stream.send(None, final)
            return
        if isinstance(item, str):
            raise TritonModelException(f"send() expects an InferenceResponse, got {item}")
        request.respond(pb_convert.requested_only(item, outputs), final)

    async def _serve_bls(self, op: str, call_id: int, request: Any) -> None:
        """Run a BLS request of the model and send back its response(s)."""
        if op == "bls_stream":
            async for response in self.host.stream_responses(request):
                self.send({"op": "stream", "id": call_id, **self._packed(response)})
            self.send({"op": "stream_end", "id": call_id})
            return
        response = await self.host.infer_async(request)
        self.send({"op": "reply", "id": call_id, **self._packed(response)})

    def _packed(self, response: InferenceResponse) -> dict[str, Any]:
        """A BLS response for the model; one whose outputs find no room in shared memory
        becomes that error (as Triton's)."""
        try:
            return pb_codec.pack_responses(self.arena, [response])
        except PoolExhausted as exc:
            error = InferenceResponse(error=TritonError(str(exc)))
            return pb_codec.pack_responses(self.arena, [error])

    async def _serve(self, op: str, message: dict[str, Any]) -> None:
        """Answer a call of the model (metric, model control, cancellation)."""
        reply: dict[str, Any] = {"op": "reply", "id": message["id"]}
        try:
            if op == "metric":
                fields = message["fields"]
                reply["value"] = self.host.metric(message["action"], message["family"], **fields)
            elif op == "model_control":
                reply["value"] = await self.host.model_control_async(
                    message["action"], **message["fields"]
                )
            elif op == "is_cancelled":
                entry = self.open.get(message["token"])
                reply["value"] = bool(entry is not None and entry[0].cancelled)
        except TritonModelException as exc:
            reply["error"] = str(exc)
        self.send(reply)

    async def _ended(self) -> None:
        self.alive = False
        with contextlib.suppress(ProcessLookupError):
            await self.process.wait()
        cleanup(self.arena.stem[:-2])  # both directions of this child
        self.arena.exports.release_all()  # device tensors it will never copy now
        for ring in (self.arena.ring, self.incoming):
            if ring is not None:
                ring.close()
        code = self.process.returncode
        error = ChildDied(f"the model process exited unexpectedly (exit code {code})")
        for future in self.executions.values():
            if not future.done():
                future.set_exception(error)
        self.executions.clear()
        for pending in (self.answer, self.finalized):
            if not pending.done():
                pending.set_exception(error)
                pending.exception()  # retrieved: nobody may be waiting
        self.ended.set()
        self.on_exit(self)

    def kill(self) -> None:
        """Kill the process now; it counts as dead from here on (its exit is handled when
        the channel ends)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        self.alive = False

    async def stop(self, timeout: float, finalize: bool = True) -> str:
        """``finalize`` (unless told not to) and wait for the exit (killed after
        ``timeout``); return finalize's error text."""
        error = ""
        if finalize:
            self.send({"op": "finalize"})
            try:
                reply = await asyncio.wait_for(asyncio.shield(self.finalized), timeout)
                error = reply.get("error", "")
            except (TimeoutError, ChildDied):
                pass
        self.alive = False
        if self.transport is not None:
            self.transport.close()
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.kill()
            await self.process.wait()
        await self.ended.wait()
        return error


def python_executable() -> str:
    return sys.executable
