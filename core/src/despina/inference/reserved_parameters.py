"""The request-parameter keys Triton reserves, which no forwarded header may take.

``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern`` turn matching
request headers into request parameters; newer Triton (server #8763) refuses a header
named as one of its reserved keys or starting with ``triton_``, with the text below.
"""

from __future__ import annotations

from despina.errors import InvalidArgument

#: Parameter keys with a meaning to Triton (besides every key starting with ``triton_``).
RESERVED_PARAMETER_KEYS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    }
)


def check_forwarded_header(key: str) -> None:
    """InvalidArgument (newer Triton's text) when a header to forward as parameter ``key``
    names a reserved key."""
    if key in RESERVED_PARAMETER_KEYS or key.startswith("triton_"):
        raise InvalidArgument(
            f"Header '{key}' is reserved for Triton usage and cannot be forwarded."
        )
