"""``InferenceRequest`` (given to ``execute``, or built for BLS), ``InferenceResponse``
and the decoupled ``InferenceResponseSender``."""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from despina_backend_python.pb import runtime
from despina_backend_python.pb.errors import TritonError, TritonModelException, require
from despina_backend_python.pb.tensor import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class PreferredMemory:
    """Where the outputs of a BLS request should be: ``TRITONSERVER_MEMORY_CPU`` (host
    memory) or ``TRITONSERVER_MEMORY_GPU`` on ``preferred_device_id``. A request without
    one gets its outputs where the model left them (as Triton)."""

    def __init__(
        self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0
    ) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class ParentTrace:
    """What ``request.trace()`` gives in process mode for a traced request: a handle the
    server resolves to the request's trace when a BLS request carries it (its spans then
    become that trace's children). In-process, ``trace()`` is the trace itself."""

    __slots__ = ("token",)

    def __init__(self, token: int) -> None:
        self.token = token


class Responder(abc.ABC):
    """The server side of a request given to ``execute``: where its responses go."""

    #: Whether the request's model is decoupled (its response sender's rules differ).
    decoupled: bool = False

    @abc.abstractmethod
    def send(self, response: InferenceResponse | None, final: bool) -> None:
        """Deliver a response (None: only the final flag)."""

    @abc.abstractmethod
    def is_cancelled(self) -> bool:
        """True once the client cancelled the request."""

    def taken(self) -> None:  # noqa: B027 - optional hook
        """The model took the request's response sender (called once)."""


class BlsHost(abc.ABC):
    """A host that runs the BLS requests of model code (:meth:`InferenceRequest.exec`);
    its methods may be called from any thread of the model."""

    #: Whether the model may send BLS requests now: not while ``initialize`` or
    #: ``finalize`` runs (Triton's rule; the backend sets it around them).
    bls_allowed: bool = True

    @abc.abstractmethod
    def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run a BLS request and wait; errors come back as the response's error."""

    @abc.abstractmethod
    def infer_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        """Run a BLS request on a decoupled model; yield its responses as they come."""

    @abc.abstractmethod
    async def infer_async(self, request: InferenceRequest) -> InferenceResponse:
        """:meth:`infer` for ``async def execute``."""

    @abc.abstractmethod
    async def infer_stream_async(self, request: InferenceRequest) -> list[InferenceResponse]:
        """Every response of a decoupled BLS request, once the final one arrived."""


def _text(value: Any) -> str:
    """A string argument; bytes (e.g. an element of a BYTES tensor) decode as UTF-8."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _parameters_json(parameters: dict[str, Any] | str | None) -> str:
    if parameters is None or parameters == "{}" or parameters == {}:
        return "{}"
    if isinstance(parameters, str):
        parameters = json.loads(parameters)
    if not isinstance(parameters, dict):
        raise TritonModelException("parameters must be a dict of str to bool, int or str")
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"parameter '{key}' must have a bool, int or str value, got {type(value).__name__}"
            )
    return json.dumps(parameters, separators=(",", ":"))


class InferenceResponse:
    """One response: output tensors, or an error; optional parameters (bool/int/str)."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if type(output_tensors) is not list:  # the usual argument passes without a call
            require(output_tensors, list | tuple, "InferenceResponse(): output_tensors")
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException("InferenceResponse error must be a pb_utils.TritonError")
        self._outputs = list(output_tensors)
        for tensor in self._outputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be pb_utils.Tensor, got {type(tensor).__name__}"
                )
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The parameters as a JSON string."""
        return self._parameters


class InferenceResponseSender:
    """Sends the responses of one request (decoupled models, or default models since 24.06).

    Triton's rules: after the final flag nothing more may be sent; a default (not
    decoupled) model sends exactly one response, and the final flag only after it. A
    response ``execute`` returns for the request counts as a final send (see
    :meth:`record`). Safe to use from any thread."""

    __slots__ = ("_closed", "_lock", "_responder", "_sent")

    def __init__(self, responder: Responder, returned: bool = False) -> None:
        """``returned``: ``execute`` returned the request's response before the model took
        this sender (the state :meth:`record` of it leaves)."""
        self._responder = responder
        self._closed = returned
        self._sent = int(returned)
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` ends the request."""
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("Inference Response object is needed when the flag is 0")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("send() expects a pb_utils.InferenceResponse")
        self.record(response, final)
        # a default model's one response ends its request (a later final flag adds nothing)
        self._responder.send(response, final or not self._responder.decoupled)

    def record(self, response: InferenceResponse | None, final: bool) -> None:
        """Count a send; raises TritonModelException (Triton's texts) where the rules
        above refuse it."""
        with self._lock:
            if not self._responder.decoupled:
                if response is not None and self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and final and not self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._closed = final
            self._sent += 1

    def close(self) -> None:
        """No more sends (after a failed ``execute``: the server answered the request)."""
        with self._lock:
            self._closed = True

    def is_cancelled(self) -> bool:
        return self._responder.is_cancelled()


class ResponseIterator:
    """The responses of a decoupled BLS request; ``cancel()`` stops early."""

    def __init__(self, responses: Iterator[InferenceResponse]) -> None:
        self._responses = responses
        self._cancelled = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._cancelled:
            raise StopIteration
        return next(self._responses)

    def cancel(self) -> None:
        self._cancelled = True


class InferenceRequest:
    """A request: the ones ``execute`` receives, or one built for BLS with
    ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])``."""

    #: ``execute`` returned a response for it before its sender was taken (a sender
    #: taken later starts as that response's final send left it).
    _returned = False

    def __init__(
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        parameters: dict[str, Any] | str | None = None,
        trace: Any = None,
    ) -> None:
        require(model_name, str | bytes, "InferenceRequest(): model_name")
        require(inputs, list | tuple, "InferenceRequest(): inputs")
        require(requested_output_names, list | tuple, "InferenceRequest(): requested_output_names")
        for name in requested_output_names:
            require(name, str | bytes, "InferenceRequest(): requested_output_names")
        require(request_id, str | bytes, "InferenceRequest(): request_id")
        require(correlation_id, int | str, "InferenceRequest(): correlation_id")
        for value, what in (
            (model_version, "model_version"),
            (flags, "flags"),
            (timeout, "timeout"),
        ):
            require(value, int, f"InferenceRequest(): {what}")
        self._model_name = _text(model_name)
        self._inputs = list(inputs)
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    "InferenceRequest inputs must be pb_utils.Tensor objects"
                )
        self._outputs = [_text(n) for n in requested_output_names]
        self._request_id = _text(request_id)
        self._correlation_id = correlation_id
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._preferred_memory = preferred_memory
        self._parameters = _parameters_json(parameters)
        self._trace = trace
        self._responder: Responder | None = None
        self._sender: InferenceResponseSender | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def incoming(
        cls,
        responder: Responder,
        inputs: list[Tensor],
        outputs: list[str],
        request_id: str,
        correlation_id: int | str,
        flags: int,
        parameters_json: str,
        model_name: str,
        model_version: int,
    ) -> InferenceRequest:
        """A request given to ``execute`` (built by the backend, not by models)."""
        request = cls.__new__(cls)
        request._model_name, request._inputs, request._outputs = model_name, inputs, outputs
        request._request_id, request._correlation_id = request_id, correlation_id
        request._model_version, request._flags, request._timeout = model_version, flags, 0
        request._preferred_memory, request._trace = None, None
        request._parameters = parameters_json
        request._responder = responder
        request._sender = None
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    # -- reading -------------------------------------------------------------------------
    def inputs(self) -> list[Tensor]:
        return self._inputs

    def get_input_tensor_by_name(self, name: str) -> Tensor | None:
        for tensor in self._inputs:
            if tensor._name == name:  # the attribute, not name(): runs for every input read
                return tensor
        return None

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def parameters(self) -> str:
        """The request parameters as a JSON string."""
        return self._parameters

    def trace(self) -> Any:
        return self._trace

    def is_cancelled(self) -> bool:
        return self._responder.is_cancelled() if self._responder is not None else False

    def get_response_sender(self) -> InferenceResponseSender:
        if self._responder is None:
            raise TritonModelException("only requests given to execute() have a response sender")
        if self._sender is None:  # one per request: it counts what was sent
            self._sender = InferenceResponseSender(self._responder, self._returned)
            self._responder.taken()
        return self._sender

    def set_release_flags(self, flags: int) -> None:
        """How the request is released once ``execute`` returns:
        ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` runs it again in a later ``execute``
        (models with ``sequence_batching { iterative_sequence: true }``; a default model
        then returns None for it)."""
        require(flags, int, "set_release_flags(): flags")
        self._release_flags = flags

    # -- BLS -----------------------------------------------------------------------------
    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` and wait: a response, or with
        ``decoupled=True`` an iterator of responses."""
        host = _bls_host()
        if decoupled:
            return ResponseIterator(host.infer_stream(self))
        return host.infer(self)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` for ``async def execute`` models (awaitable)."""
        host = _bls_host()
        if decoupled:
            return ResponseIterator(iter(await host.infer_stream_async(self)))
        return await host.infer_async(self)


def _bls_host() -> BlsHost:
    """The host to send a BLS request to; raises outside ``execute`` (as Triton)."""
    host = runtime.current()
    if not isinstance(host, BlsHost) or not host.bls_allowed:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return host


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input ``name`` of a request, or None."""
    return inference_request.get_input_tensor_by_name(name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The output ``name`` of a response, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None
