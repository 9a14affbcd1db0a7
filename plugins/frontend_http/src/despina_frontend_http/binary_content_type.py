"""The JSON header's size a platform's binary content type carries (SageMaker's and
Vertex AI's ``application/vnd.<platform>-triton.binary+json;json-header-size=N``): the
binary tensor extension with the header size in ``Content-Type`` instead of
``Inference-Header-Content-Length``, read as tritonserver reads it."""

from __future__ import annotations

import re

#: ``std::stoi``: leading blanks, a sign, digits; the rest ignored.
_STOI = re.compile(r"\s*([+-]?[0-9]+)")


def binary_header_length(content_type: str | None, mime: str, body_size: int) -> str | None:
    """The JSON header's size ``content_type`` gives, where it starts with ``mime`` (the
    prefix up to ``json-header-size=``); None when it names no such type (the whole body
    is JSON). ValueError with tritonserver's texts for a bad one."""
    if content_type is None:
        return None
    pos = content_type.find(mime)
    if pos < 0:
        return None
    if pos != 0:
        raise ValueError(
            f"expect MIME type for binary data starts with '{mime}', got: {content_type}"
        )
    raw = content_type[len(mime) :]
    found = _STOI.match(raw)
    if found is None:
        raise ValueError(f"Unable to parse inference header size, got: {raw}")
    size = int(found[1])
    if size < 0 or size > body_size:
        raise ValueError(f"inference header size should be in range (0, {body_size}), got: {raw}")
    return str(size)
