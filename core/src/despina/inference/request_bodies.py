"""Request bodies in memory: the server-wide budget of the bytes they hold
(``--max-inflight-request-bytes``) and the gzip/deflate inflater every frontend uses.

A frontend opens a :class:`BodyCharge` per request body (:meth:`BodyBudget.charge`),
adds the bytes the body comes to hold as it buffers or inflates (:meth:`BodyCharge.add`
raises :class:`BodyBudgetExhausted` instead of passing the budget) and releases the charge
on every path once the body no longer counts; each frontend states when that is. A body
that arrives whole in one read is not charged (it costs one read, and keeps the small
request's path free of the budget). Releasing a large charge hands the memory freed
meanwhile back to the system (glibc keeps freed memory otherwise).

:class:`Inflation` inflates in steps of :data:`INFLATE_STEP` output bytes, checking every
step against the body's limit and charging it, so a compression bomb costs at most its
limit (or what the budget has left) plus one step before it is refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import zlib
from pathlib import Path

from despina.errors import DespinaError

#: Output bytes inflated per step, and compressed bytes fed per step.
INFLATE_STEP = 1 << 18
#: Releasing a charge of at least this many bytes gives freed memory back to the system.
TRIM_FROM = 64 << 20
#: The part of the memory available (physical, or the cgroup's limit) that the default
#: budget lets request bodies hold.
DEFAULT_FRACTION = 0.5
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


def available_memory() -> int:
    """Physical memory, or the process's cgroup memory limit when that is lower."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def default_budget() -> int:
    """The default ``--max-inflight-request-bytes``: :data:`DEFAULT_FRACTION` of
    :func:`available_memory`."""
    return int(available_memory() * DEFAULT_FRACTION)


class BodyTooLarge(Exception):
    """A body passes its limit: inflated so far, or as its gzip trailer announces."""


class BodyUndecodable(Exception):
    """Compressed data that is not valid, or ends before its end; the text says why."""


class BodyBudgetExhausted(DespinaError):
    """The server holds ``--max-inflight-request-bytes`` of request bodies already: the
    body fits once others are done (HTTP 503 with ``Retry-After``)."""

    http_status = 503
    grpc_code = "RESOURCE_EXHAUSTED"
    triton_code = "UNAVAILABLE"


class BodyOverBudget(BodyBudgetExhausted):
    """The body alone needs more than the whole budget: no retry helps (HTTP 413)."""

    http_status = 413


class BodyBudget:
    """The bytes request bodies may hold at once, server-wide; ``limit`` 0: no budget
    (charges count nothing). Thread-safe: inflation steps charge from worker threads."""

    __slots__ = ("_lock", "_trimming", "held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes charged now.
        self.held = 0
        self._lock = threading.Lock()
        self._trimming = False

    def charge(self) -> BodyCharge:
        """A new body's charge, holding nothing yet."""
        return BodyCharge(self)

    def _take(self, charge: BodyCharge, size: int) -> None:
        with self._lock:
            if charge.released:
                return
            if self.held + size > self.limit:
                total = charge.size + size
                if total > self.limit:
                    raise BodyOverBudget(
                        f"the request body needs more than the server's "
                        f"{self.limit} bytes for request bodies in flight "
                        "(--max-inflight-request-bytes)"
                    )
                raise BodyBudgetExhausted(
                    f"the server holds its {self.limit} bytes for request bodies in flight "
                    "(--max-inflight-request-bytes); retry later"
                )
            self.held += size
            charge.size += size

    def _give(self, charge: BodyCharge, size: int | None) -> None:
        with self._lock:
            size = charge.size if size is None else min(size, charge.size)
            charge.size -= size
            self.held -= size
            trim = size >= TRIM_FROM and not self._trimming
            self._trimming = self._trimming or trim
        if trim:
            threading.Thread(target=self._trim, name="despina-malloc-trim", daemon=True).start()

    def _trim(self) -> None:
        try:
            give_back_memory()
        finally:
            self._trimming = False


class BodyCharge:
    """What one body holds of its :class:`BodyBudget`."""

    __slots__ = ("budget", "released", "size")

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        #: Bytes charged.
        self.size = 0
        #: Set by :meth:`release`: nothing is charged afterwards.
        self.released = False

    def add(self, size: int) -> None:
        """Charge ``size`` more bytes. Raises BodyOverBudget when the body's total passes
        the whole budget, BodyBudgetExhausted when other bodies hold the rest; either way
        nothing is added. Counts nothing once released (the body is being dropped) or
        without a budget."""
        if self.budget.limit:
            self.budget._take(self, size)

    def give_back(self, size: int) -> None:
        """Give back ``size`` of the bytes charged (a part of the body was dropped)."""
        if self.budget.limit:
            self.budget._give(self, size)

    def release(self) -> None:
        """Give every byte back and charge nothing more (idempotent); the memory freed
        meanwhile goes back to the system after a large body."""
        self.released = True
        if self.budget.limit:
            self.budget._give(self, None)


_libc: ctypes.CDLL | None = None


def give_back_memory() -> None:
    """Return the free memory of the C allocator's heaps to the system (glibc's
    ``malloc_trim(0)``; nothing where libc has none). Blocks while it runs."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"))
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


class Inflation:
    """One whole compressed body inflating step by step (:data:`INFLATE_STEP`), each
    step checked against ``limit`` and charged to ``charge``.

    ``encoding`` is ``gzip`` or ``deflate`` (zlib-wrapped, else raw deflate, as HTTP
    clients send it). :meth:`advance` may run on the event loop for a bounded output and
    :meth:`finish` in a worker thread (zlib releases the GIL while it inflates);
    :meth:`cancel` (from any thread) stops a running one after its current step. A
    refused inflation drops what it inflated before raising.
    """

    __slots__ = (
        "_cancelled",
        "_charge",
        "_chunk",
        "_done",
        "_full",
        "_inflater",
        "_input",
        "_limit",
        "_pieces",
        "_start",
        "_total",
        "encoding",
    )

    def __init__(self, data: bytes, encoding: str, limit: int, charge: BodyCharge) -> None:
        """Raises BodyTooLarge when a gzip trailer announces more than ``limit`` (the
        inflated size is that modulo 2**32, or the data is not valid): nothing is
        inflated then; ValueError for an encoding other than gzip and deflate."""
        if encoding == "gzip":
            if len(data) >= 18 and int.from_bytes(data[-4:], "little") > limit:
                raise BodyTooLarge(encoding)
            wbits = 31
        elif encoding == "deflate":
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            wbits = 15 if wrapped else -15
        else:
            raise ValueError(f"not an encoding to inflate: {encoding!r}")
        self._inflater = zlib.decompressobj(wbits=wbits)
        self.encoding = encoding
        self._input = data
        self._limit = limit
        self._charge = charge
        self._start = 0  # of the next input step
        self._chunk: bytes | memoryview = b""  # what the last step left unconsumed
        self._full = False  # the last step's output was a whole step: more may be due
        self._pieces: list[bytes] = []
        self._total = 0
        self._done = not data  # nothing compressed: an empty body
        self._cancelled = False

    def cancel(self) -> None:
        """Stop inflating at the next step (the body is no longer wanted)."""
        self._cancelled = True

    def finish(self) -> bool:
        """Inflate the rest; False when cancelled first. Raises as :meth:`advance`."""
        return self.advance(None)

    def advance(self, output_budget: int | None) -> bool:
        """Inflate until the body is whole (True) or this call produced more than
        ``output_budget`` bytes (False; None: no bound) or was cancelled (False).

        Raises BodyTooLarge as soon as the output passes ``limit``, BodyBudgetExhausted
        (or BodyOverBudget) when the charge cannot take a step, BodyUndecodable for data
        that is not valid or ends early; the rest is never inflated.
        """
        try:
            return self._advance(output_budget)
        except BaseException:
            self._pieces.clear()
            self._done = True
            raise

    def _advance(self, output_budget: int | None) -> bool:
        produced = 0
        data, step, inflater = self._input, INFLATE_STEP, self._inflater
        while not self._done:
            if self._cancelled or (output_budget is not None and produced > output_budget):
                return False
            if not self._chunk and not self._full:
                if self._start >= len(data) or inflater.eof:
                    if not inflater.eof:
                        raise BodyUndecodable(f"the {self.encoding} data ends before its end")
                    self._done = True
                    break
                self._chunk = memoryview(data)[self._start : self._start + step]
                self._start += step
            try:
                piece = inflater.decompress(self._chunk, step)
            except zlib.error as exc:
                raise BodyUndecodable(str(exc)) from None
            produced += len(piece)
            self._total += len(piece)
            if self._total > self._limit:
                raise BodyTooLarge(self.encoding)
            self._charge.add(len(piece))
            self._pieces.append(piece)
            self._chunk = inflater.unconsumed_tail
            self._full = len(piece) == step
        return True

    def result(self) -> bytes:
        """The inflated body (once :meth:`advance` or :meth:`finish` returned True)."""
        pieces, self._pieces = self._pieces, []
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def inflate(data: bytes, encoding: str, limit: int, charge: BodyCharge) -> bytes:
    """``data`` inflated whole (an :class:`Inflation` run at once); raises as it does."""
    inflation = Inflation(data, encoding, limit, charge)
    inflation.finish()
    return inflation.result()
