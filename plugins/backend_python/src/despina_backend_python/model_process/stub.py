"""The child process of a ``process``-mode instance: runs one ``model.py``.

Started as ``python -m despina_backend_python.model_process.stub <fd>`` with one end of a socket pair.
The first message is ``init`` (import the model, ``initialize``, answer ``ready``) or
``auto_complete`` (answer the completed config, then exit). After ``ready``:

- there is no reader thread: a thread waiting for a message reads the channel itself
  when no other thread is reading (:meth:`BlockingChannel.pump_until`), routing every
  message in arrival order (small tensors are copied out of the ring then): ``execute``
  and ``finalize`` go to the main thread's work (or the loop), replies (BLS, metrics,
  ...) complete waiting calls. An idle main thread is the reader, so an ``execute``
  reaches the model without a thread hand-off;
- a synchronous ``execute`` runs on the main thread (calls stay in order); an
  ``async def execute`` runs as tasks on an event loop thread, many at once;
- the model reaches the server (BLS, Logger, metrics) through :class:`ChildRuntime`.

Only numpy and this package are needed, so it also runs in other Python environments
(``EXECUTION_ENV_PATH``). asyncio (and the ssl module it loads, ~7 MiB resident) is
imported only when the model needs the event loop: async ``execute``/``initialize``/
``is_ready`` or an async BLS call. Exits when the server closes the channel.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import os
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from despina_backend_python.hosting.heap import release_free_heap
from despina_backend_python.hosting.loading import describe_exception, load_model_class
from despina_backend_python.hosting.readiness import defines_is_ready, readiness_of
from despina_backend_python.hosting.returned import (
    ReturnedError,
    check_returned,
    close_senders,
)
from despina_backend_python.pb import runtime as pb_runtime
from despina_backend_python.pb.errors import TritonError, TritonModelException
from despina_backend_python.pb.messages import (
    BlsHost,
    InferenceRequest,
    InferenceResponse,
    ParentTrace,
    Responder,
)
from despina_backend_python.pb.model_config import NOT_A_MODEL_CONFIG, ModelConfig
from despina_backend_python.wire import cuda_ipc, pb_codec
from despina_backend_python.wire.channel import BlockingChannel
from despina_backend_python.wire.shm import (
    LINKED_OP,
    Arena,
    PoolExhausted,
    Ring,
    set_link_handler,
    unpack,
)

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Future

_END = object()


def _unsent(exc: PoolExhausted) -> InferenceResponse:
    """The response of a BLS request whose inputs found no room in shared memory."""
    return InferenceResponse(error=TritonError(str(exc)))


class ChildRuntime(pb_runtime.Runtime, BlsHost):
    """Forwards the model's calls to the server and waits for the replies."""

    def __init__(
        self,
        channel: BlockingChannel,
        arena: Arena,
        incoming: Ring,
        hello: dict[str, Any],
        wait_for: Callable[[Callable[[], bool]], None],
    ) -> None:
        self.channel = channel
        #: Blocks until the condition holds, reading the channel meanwhile if needed.
        self.wait_for = wait_for
        self.arena = arena
        self.incoming = incoming
        self.model_name = hello["model_name"]
        self.model_dir = hello["model_dir"]
        self._ids = itertools.count(1)
        self.waiting: dict[int, Future[dict[str, Any]] | queue.SimpleQueue[Any]] = {}

    def call(self, op: str, pack: Any = None, **body: Any) -> Future[dict[str, Any]]:
        """Send a request (``pack`` adds its tensors); the future completes with the
        server's reply."""
        from concurrent.futures import Future  # with logging: ~0.7 MB, only once a model calls

        call_id = next(self._ids)
        future: Future[dict[str, Any]] = Future()
        self.waiting[call_id] = future
        try:
            self.channel.send({"op": op, "id": call_id, **body}, pack)
        except BaseException:
            del self.waiting[call_id]
            raise
        return future

    def wait(self, future: Future[dict[str, Any]]) -> dict[str, Any]:
        """The reply of :meth:`call` (blocking)."""
        self.wait_for(future.done)
        return future.result()

    def route(self, message: dict[str, Any]) -> None:
        """A reply from the server (on the reading thread: tensors are copied out here,
        in order)."""
        op, call_id = message["op"], message["id"]
        if "responses" in message:
            message["unpacked"] = pb_codec.unpack_responses(message, self.incoming)
        target = self.waiting.get(call_id)
        if isinstance(target, queue.SimpleQueue):
            target.put(_END if op == "stream_end" else message)
            if op == "stream_end":
                del self.waiting[call_id]
        elif target is not None:
            del self.waiting[call_id]
            target.set_result(message)

    @staticmethod
    def _response(reply: dict[str, Any]) -> InferenceResponse:
        item = reply["unpacked"][0]
        assert isinstance(item, InferenceResponse)
        return item

    def _packer(self, request: InferenceRequest) -> Any:
        return lambda: pb_codec.pack_request(self.arena, request)

    def infer(self, request: InferenceRequest) -> InferenceResponse:
        try:
            future = self.call("bls", self._packer(request))
        except PoolExhausted as exc:  # as Triton: the BLS response carries the error
            return _unsent(exc)
        return self._response(self.wait(future))

    async def infer_async(self, request: InferenceRequest) -> InferenceResponse:
        import asyncio  # loaded already: this coroutine runs on the event loop

        try:
            future = self.call("bls", self._packer(request))
        except PoolExhausted as exc:
            return _unsent(exc)
        return self._response(await asyncio.wrap_future(future))

    def infer_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        call_id = next(self._ids)
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.waiting[call_id] = items
        try:
            self.channel.send({"op": "bls_stream", "id": call_id}, self._packer(request))
        except PoolExhausted as exc:  # one error response ends the stream
            del self.waiting[call_id]
            yield _unsent(exc)
            return
        while True:
            self.wait_for(lambda: not items.empty())
            if (item := items.get()) is _END:
                return
            yield self._response(item)

    async def infer_stream_async(self, request: InferenceRequest) -> list[InferenceResponse]:
        import asyncio  # loaded already: this coroutine runs on the event loop

        return await asyncio.to_thread(lambda: list(self.infer_stream(request)))

    def log(self, level: str, message: str) -> None:
        self.channel.send({"op": "log", "level": level, "message": message})

    def metric(self, action: str, family: str, **fields: Any) -> float:
        reply = self.wait(self.call("metric", action=action, family=family, fields=fields))
        if reply.get("error"):
            raise TritonModelException(reply["error"])
        return float(reply["value"])

    def model_control(self, action: str, **fields: Any) -> Any:
        reply = self.wait(self.call("model_control", action=action, fields=fields))
        if reply.get("error"):
            raise TritonModelException(reply["error"])
        return reply.get("value")


class ChildResponder(Responder):
    """A request's response sender in the child: each send is one message."""

    __slots__ = ("decoupled", "stub", "token")

    def __init__(self, stub: Stub, token: int) -> None:
        self.stub, self.token = stub, token
        self.decoupled = stub.decoupled

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        items = [] if response is None else [response]
        self.stub.channel.send(
            {"op": "send", "token": self.token, "final": final},
            lambda: pb_codec.pack_responses(self.stub.arena, items),
        )

    def is_cancelled(self) -> bool:
        runtime = self.stub.runtime
        reply = runtime.wait(runtime.call("is_cancelled", token=self.token))
        return bool(reply["value"])


class Stub:
    """The model of this process and the loop that serves it."""

    def __init__(self, channel: BlockingChannel, hello: dict[str, Any]) -> None:
        self.channel = channel
        self.hello = hello
        self.incoming = Ring(hello["rings"][0])
        self.arena = Arena(hello["prefix"], hello["tag"] + "c", Ring(hello["rings"][1]))
        self.runtime = ChildRuntime(channel, self.arena, self.incoming, hello, self.wait_for)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()  # is_ready's thread may be first to need it
        #: Synchronous executions, in order, run by the main thread (None: finalize).
        self.work: deque[tuple[int, list[InferenceRequest]] | None] = deque()
        self.model: Any = None
        self.is_async = False
        args = hello.get("args", {})  # none in an ``auto_complete`` hello
        self.instance_name: str = args.get("model_instance_name", "")
        policy = json.loads(args.get("model_config", "{}")).get("model_transaction_policy", {})
        self.decoupled = bool(policy.get("decoupled", False))
        #: The configured poll window (DESPINA_CHANNEL_POLL_US), used while the server
        #: says it pays (see ``route``).
        self.poll_s = float(hello.get("poll_us", 0)) / 1e6

    def wait_for(self, done: Callable[[], bool]) -> None:
        """Block until ``done()``, reading and routing messages meanwhile."""
        self.channel.pump_until(done, self.route)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop, running on a thread of its own from the first use on."""
        with self._loop_lock:
            if self._loop is None:
                import asyncio

                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="asyncio", daemon=True).start()
                self._loop = loop
        return self._loop

    def run_coroutine(self, coro: Any) -> Any:
        """Run ``coro`` on the event loop thread and wait for it."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        future.add_done_callback(lambda _: self.channel.wake())
        self.wait_for(future.done)
        return future.result()

    def load(self) -> dict[str, Any]:
        """Import the model and run ``initialize``; the ``ready`` (or ``error``) message."""
        pb_runtime.activate(self.runtime)
        try:
            model_class = load_model_class(self.hello["model_file"])
            self.model = model_class()
            if hasattr(self.model, "initialize"):
                self.runtime.bls_allowed = False
                result = self.model.initialize(self.hello["args"])
                if inspect.isawaitable(result):
                    self.run_coroutine(_awaited(result))
                self.runtime.bls_allowed = True
        except BaseException as exc:  # noqa: BLE001 - reported to the server as the reason
            return {"op": "error", "message": describe_exception(exc)}
        self.is_async = inspect.iscoroutinefunction(self.model.execute)
        has_cupy = importlib.util.find_spec("cupy") is not None  # finds, never imports
        return {
            "op": "ready",
            "is_async": self.is_async,
            "is_ready": defines_is_ready(self.model),
            "pid": os.getpid(),
            "cupy": has_cupy,
        }

    def route(self, message: dict[str, Any] | None) -> None:
        """Handle one message of the server (None: the server went away, exit)."""
        if message is None:
            os._exit(0)
        op = message["op"]
        if op == cuda_ipc.DONE_OP:
            self.arena.exports.release(message["key"])
        elif op in ("reply", "stream", "stream_end"):
            self.runtime.route(message)
        elif op == "execute":
            # Poll for the next message only while the server had nothing else in flight
            # here: under load the next message is queued anyway, and polling would take
            # the CPU the server needs to produce it.
            self.channel.poll_s = self.poll_s if message["poll"] else 0.0
            requests = self._requests(message)
            if self.is_async:
                self.loop.call_soon_threadsafe(self._start_async, message["id"], requests)
            else:
                self.work.append((message["id"], requests))
        elif op == "finalize":
            self.work.append(None)
        elif op == "is_ready":  # on a thread of its own, as Triton's: execute may be running
            threading.Thread(
                target=self._answer_readiness, args=(message["id"],), name="is_ready", daemon=True
            ).start()
        if (done := cuda_ipc.done_message(message)) is not None:
            self.channel.send(done)  # its device tensors are copied: the server may free them

    def _requests(self, message: dict[str, Any]) -> list[InferenceRequest]:
        tensors = unpack(message, self.incoming)
        make = pb_codec.tensor_maker(message)
        requests, at = [], 0
        for fields in message["requests"]:
            inputs = [make(n, a) for n, a in tensors[at : at + fields["n"]]]
            at += fields["n"]
            request = InferenceRequest.incoming(
                ChildResponder(self, fields["token"]),
                inputs,
                fields["outputs"],
                request_id=fields["id"],
                correlation_id=fields["corr"],
                flags=fields["flags"],
                parameters_json=fields["params"],
                model_name=self.hello["model_name"],
                model_version=int(self.hello["args"]["model_version"]),
            )
            if fields["traced"]:  # a BLS request built with trace=request.trace() says so
                request._trace = ParentTrace(fields["token"])
            requests.append(request)
        return requests

    def serve(self) -> None:
        """Run executions until ``finalize``: synchronous ones on this thread, async ones
        on the event loop thread (this thread then only reads the channel)."""
        while True:
            self.wait_for(self._has_work)
            item = self.work.popleft()
            if item is None:
                break
            self._run_sync(*item)
        if self.is_async:
            self.run_coroutine(_drain())
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._finalize()

    def _has_work(self) -> bool:
        return bool(self.work)

    def _start_async(self, exec_id: int, requests: list[InferenceRequest]) -> None:
        self.loop.create_task(self._run_async(exec_id, requests))

    def _run_sync(self, exec_id: int, requests: list[InferenceRequest]) -> None:
        start = time.monotonic_ns()
        try:
            result = self.model.execute(requests)
        except BaseException as exc:  # noqa: BLE001 - reported to the server
            self._failed(exec_id, requests, describe_exception(exc))
            return
        self._executed(exec_id, requests, result, (start, time.monotonic_ns()))

    async def _run_async(self, exec_id: int, requests: list[InferenceRequest]) -> None:
        start = time.monotonic_ns()
        try:
            result = await self.model.execute(requests)
        except BaseException as exc:  # noqa: BLE001 - reported to the server
            message = describe_exception(exc)
            if self.decoupled:  # as Triton: logged, its senders may have ended every request
                self.runtime.log("ERROR", message)
            self._failed(exec_id, requests, message)
            return
        self._executed(exec_id, requests, result, (start, time.monotonic_ns()))

    def _failed(self, exec_id: int, requests: list[InferenceRequest], message: str) -> None:
        close_senders(requests)
        self.channel.send({"op": "executed", "id": exec_id, "exception": message})

    def _executed(
        self, exec_id: int, requests: list[InferenceRequest], result: Any, span: tuple[int, int]
    ) -> None:
        """Reply to an execution; ``span``: when the model's ``execute`` began and ended
        (monotonic ns: the server reports them as the compute split)."""
        try:
            unanswered, rescheduled = check_returned(
                self.instance_name, requests, result, self.decoupled
            )
        except ReturnedError as exc:
            self._failed(exec_id, requests, str(exc))
            return
        reply: dict[str, Any] = {
            "op": "executed",
            "id": exec_id,
            "unanswered": unanswered,
            "rescheduled": rescheduled,
            "span": span,
        }
        pack = None
        if isinstance(result, list | tuple):
            items = list(result)
            pack = lambda: pb_codec.pack_responses(self.arena, items)  # noqa: E731
        elif result is not None:
            reply["invalid_result"] = type(result).__name__
        try:
            self.channel.send(reply, pack)
        except PoolExhausted as exc:  # no room for the outputs: these requests fail
            self._failed(exec_id, requests, str(exc))

    def _answer_readiness(self, call_id: int) -> None:
        """Call the model's ``is_ready()`` (a coroutine it returns runs on the event loop
        thread) and send its answer, or why it failed."""
        reply: dict[str, Any] = {"op": "readiness", "id": call_id}
        pb_runtime.activate(self.runtime)
        try:
            value = self.model.is_ready()
            if inspect.isawaitable(value):
                import asyncio

                value = asyncio.run_coroutine_threadsafe(_awaited(value), self.loop).result()
            reply["ready"] = readiness_of(value)
        except BaseException as exc:  # noqa: BLE001 - reported to the server
            reply["error"] = describe_exception(exc)
        self.channel.send(reply)

    def _finalize(self) -> None:
        message = ""
        self.runtime.bls_allowed = False
        try:
            if hasattr(self.model, "finalize"):
                self.model.finalize()
        except BaseException as exc:  # noqa: BLE001 - reported to the server
            message = describe_exception(exc)
        pb_runtime.forget(self.runtime)  # objects the model leaves now call no more (metrics)
        self.channel.send({"op": "finalized", "error": message})


async def _awaited(value: Any) -> Any:
    return await value


async def _drain() -> None:
    """Wait for the async executions still running (before ``finalize``)."""
    import asyncio

    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.gather(*others, return_exceptions=True)


def auto_complete(stub: Stub, hello: dict[str, Any]) -> dict[str, Any]:
    """The ``config`` (JSON) after the model's ``auto_complete_config``, or an error."""
    pb_runtime.activate(stub.runtime)
    try:
        model_class = load_model_class(hello["model_file"])
        hook = getattr(model_class, "auto_complete_config", None)
        if hook is None:
            return {"op": "config", "config": ""}
        result = hook(ModelConfig(hello["config"]))
        if not isinstance(result, ModelConfig):
            return {"op": "error", "message": NOT_A_MODEL_CONFIG.format(model=hello["model_name"])}
        return {"op": "config", "config": json.dumps(result.as_dict())}
    except BaseException as exc:  # noqa: BLE001 - reported to the server
        return {"op": "error", "message": describe_exception(exc)}


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the server dies (even if the model is stuck)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed channel still ends us
        pass


def main(argv: list[str]) -> int:
    _die_with_parent()
    channel = BlockingChannel(socket.socket(fileno=int(argv[1])))
    set_link_handler(lambda identity: channel.send({"op": LINKED_OP, "identity": identity}))
    del sys.argv[1:]  # as in Triton's stub, the model sees no arguments (unittest.main)
    hello = channel.recv()
    if hello is None:
        return 0
    stub = Stub(channel, hello)
    if hello["op"] == "auto_complete":
        channel.send(auto_complete(stub, hello))
        return 0
    ready = stub.load()
    channel.send(ready)
    if ready["op"] != "ready":
        return 1
    release_free_heap()
    stub.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
