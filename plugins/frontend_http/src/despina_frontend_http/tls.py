"""The HTTP port's TLS context (``--http-use-ssl``, ``--http-use-ssl-mutual``): one
:class:`ssl.SSLContext` built from the certificate files, for Despina's front."""

from __future__ import annotations

import ssl


def server_context(cert: str, key: str, root: str | None, mutual: bool) -> ssl.SSLContext:
    """A server context, TLS 1.2 or later; client certificates required when ``mutual``
    (checked against ``root``), requested and checked when only ``root`` is given, as on
    the gRPC port. OSError / ssl.SSLError for files that cannot be read or used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    if root:
        context.load_verify_locations(root)
        context.verify_mode = ssl.CERT_REQUIRED if mutual else ssl.CERT_OPTIONAL
    return context
