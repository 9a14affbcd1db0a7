"""Forwarded headers: which request headers become request parameters, and the
parameter keys Triton reserves, which no forwarded header may take.

``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern`` turn matching
request headers into request parameters. Triton compiles the pattern with RE2, prefixed
with ``(?i)``: case-insensitive unless the pattern turns that off (``(?-i)MY_HEADER.*``);
so does Despina, through Google's RE2 bindings (``google-re2``), whose syntax Python's
``re`` does not share (it refuses ``(?-i)`` without a group). Newer Triton (server #8763)
refuses a header named as one of its reserved keys or starting with ``triton_``, with
the text below.
"""

from __future__ import annotations

from collections.abc import Callable

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


def header_forward_matcher(pattern: str) -> Callable[[str], object] | None:
    """A function whose result is truthy for a header name ``pattern`` selects (RE2 syntax,
    searched anywhere in the name, case-insensitive unless the pattern turns it off, as
    Triton); None for an empty pattern (nothing forwarded). ValueError for a pattern RE2
    refuses, with RE2's reason."""
    if not pattern:
        return None
    import re2  # only where a pattern is given: ~1 MB of resident memory otherwise unused

    options = re2.Options()
    options.log_errors = False
    try:
        compiled = re2.compile(f"(?i){pattern}", options)
    except re2.error as exc:
        reason = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc.args[0]
        raise ValueError(f"invalid header forward pattern '{pattern}': {reason}") from None
    search: Callable[[str], object] = compiled.search
    return search
