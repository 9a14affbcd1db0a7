"""The HTTP/2 engine's sizes and its limits on abuse (RFC 9113 section 10.5).

A client past one of the abuse limits gets GOAWAY and the connection closes; the numbers
are far above what a gRPC client sends. The budgets count per connection, over
:data:`FLOOD_WINDOW` seconds of a clock the engine is given.
"""

from __future__ import annotations

from collections.abc import Callable

#: Receive window of each stream and (enlarged at once) of the connection.
STREAM_WINDOW = 1 << 22
CONNECTION_WINDOW = 1 << 24
#: Largest frame we accept, advertised in our SETTINGS.
MAX_FRAME = 1 << 20
#: Largest request header block (all fragments) and decoded header list
#: (SETTINGS_MAX_HEADER_LIST_SIZE): a larger one, or an HPACK block that decodes to more
#: (an "HPACK bomb"), is a connection error ENHANCE_YOUR_CALM.
MAX_HEADER_BLOCK = 1 << 16
#: SETTINGS_MAX_CONCURRENT_STREAMS (default of ``--grpc-max-concurrent-streams``): a
#: stream opened beyond it is refused (RST_STREAM REFUSED_STREAM); grpc clients queue
#: their calls instead of opening it.
MAX_CONCURRENT_STREAMS = 1024
#: CONTINUATION frames one header block may take (a block of MAX_HEADER_BLOCK bytes needs
#: at most 4 at the smallest frame size); beyond it: ENHANCE_YOUR_CALM (the CONTINUATION
#: flood, CVE-2024-27316, sends empty ones).
MAX_CONTINUATIONS = 16
#: The window, in seconds, over which the budgets below are counted.
FLOOD_WINDOW = 10.0
#: Streams reset in FLOOD_WINDOW: RST_STREAM from the client on a stream still open here
#: ("rapid reset", CVE-2023-44487), and our RST_STREAMs answering the client's stream
#: errors (refused streams, bad WINDOW_UPDATEs); beyond it: ENHANCE_YOUR_CALM.
MAX_RESETS = 1000
#: Frames that carry no request data in FLOOD_WINDOW: SETTINGS, PING, PRIORITY,
#: RST_STREAM on a stream already closed, empty DATA, GOAWAY and unknown frame types
#: (SETTINGS and PING floods make us answer each, CVE-2019-9512/9515); beyond it:
#: ENHANCE_YOUR_CALM. Legitimate clients send a few per call at most (BDP pings).
MAX_CONTROL_FRAMES = 1000
#: Streams we recently reset whose late frames are ignored (RFC 9113 section 5.1).
RESETS_REMEMBERED = 256
#: The opaque data of our keepalive PINGs.
KEEPALIVE_OPAQUE = b"despina!"
#: The opaque data of the PING sent with the first GOAWAY of a graceful shutdown.
GOAWAY_OPAQUE = b"goaway!!"
#: The largest stream id, named by the first GOAWAY of a graceful shutdown.
MAX_STREAM_ID = (1 << 31) - 1
#: The PING interval that counts as abuse on a connection without calls (when pings
#: without calls are not permitted), in seconds, as gRPC's core.
IDLE_PING_INTERVAL = 7200.0


class Budget:
    """A count of events allowed ``limit`` times per :data:`FLOOD_WINDOW` seconds.

    O(1) and allocation-free per event: the clock is read once per ``limit`` events,
    when the count runs out; if the window that count began has not passed, the budget
    is spent. (The window starts at the last reading, at or before its first event, so
    a client is never refused at a rate below ``limit`` per window.)
    """

    __slots__ = ("clock", "left", "limit", "since")

    def __init__(self, limit: int, clock: Callable[[], float]) -> None:
        self.limit = self.left = limit
        self.clock = clock
        self.since = clock()

    def spend(self) -> bool:
        """Count one event; False when it is one too many."""
        self.left -= 1
        if self.left >= 0:
            return True
        now = self.clock()
        if now - self.since < FLOOD_WINDOW:
            return False
        self.left, self.since = self.limit - 1, now
        return True
