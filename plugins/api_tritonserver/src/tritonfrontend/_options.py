"""The frontends' options: Triton's fields and defaults, with their checks (a value of the
wrong type or out of range raises ValueError when the options are made)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

#: The range of a port.
_PORT = (0, 65535)


class Grpc_compression_level(IntEnum):
    NONE = 0
    LOW = 1
    MED = 2
    HIGH = 3
    COUNT = 4


def check_fields(options: Any, minimums: dict[str, int]) -> None:
    """ValueError unless every field has its declared type (int fields: not bool) and
    every field in ``minimums`` is at least that; ports are 0..65535."""
    for item in dataclasses.fields(options):
        value: Any = getattr(options, item.name)
        expected: type[Any] = {"str": str, "int": int, "bool": bool}[str(item.type).split(" ")[0]]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ValueError(f"{item.name}: {value!r} is not of type {expected.__name__}")
        if item.name == "port" and not _PORT[0] <= value <= _PORT[1]:
            raise ValueError(f"port: {value} is not in {_PORT[0]}..{_PORT[1]}")
        if item.name in minimums and value < minimums[item.name]:
            raise ValueError(f"{item.name}: {value} is less than {minimums[item.name]}")


def flag(value: bool) -> str:
    return "true" if value else "false"


@dataclass
class HttpOptions:
    address: str = "0.0.0.0"
    port: int = 8000
    reuse_port: bool = False
    thread_count: int = 8
    header_forward_pattern: str = ""

    def __post_init__(self) -> None:
        check_fields(self, {"thread_count": 1})

    def args(self) -> list[str]:
        """The despina-frontend-http flags of these options."""
        return [
            "--allow-http=true",
            f"--http-address={self.address}",
            f"--http-port={self.port}",
            f"--reuse-http-port={flag(self.reuse_port)}",
            f"--http-thread-count={self.thread_count}",
            f"--http-header-forward-pattern={self.header_forward_pattern}",
        ]


@dataclass
class GrpcOptions:
    address: str = "0.0.0.0"
    port: int = 8001
    reuse_port: bool = False
    use_ssl: bool = False
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    use_mutual_auth: bool = False
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0
    max_connection_age_grace_ms: int = 0
    infer_compression_level: int = Grpc_compression_level.NONE
    infer_thread_count: int = 2
    infer_allocation_pool_size: int = 8
    max_response_pool_size: int = 2_147_483_647
    forward_header_pattern: str = ""

    def __post_init__(self) -> None:
        self.infer_compression_level = int(self.infer_compression_level)
        check_fields(self, {f.name: 0 for f in dataclasses.fields(self) if f.type == "int"})

    def args(self) -> list[str]:
        """The despina-frontend-grpc flags (and Triton's inert gRPC flags) of these
        options."""
        level = Grpc_compression_level(self.infer_compression_level).name.lower()
        ages = {  # 0, the default: connections never age out
            "--grpc-max-connection-age": self.max_connection_age_ms,
            "--grpc-max-connection-age-grace": self.max_connection_age_grace_ms,
        }
        return [
            *(f"{flag}={ms}" for flag, ms in ages.items() if ms > 0),
            "--allow-grpc=true",
            f"--grpc-address={self.address}",
            f"--grpc-port={self.port}",
            f"--reuse-grpc-port={flag(self.reuse_port)}",
            f"--grpc-use-ssl={flag(self.use_ssl and not self.use_mutual_auth)}",
            f"--grpc-use-ssl-mutual={flag(self.use_ssl and self.use_mutual_auth)}",
            f"--grpc-server-cert={self.server_cert}",
            f"--grpc-server-key={self.server_key}",
            f"--grpc-root-cert={self.root_cert}",
            f"--grpc-keepalive-time={self.keepalive_time_ms}",
            f"--grpc-keepalive-timeout={self.keepalive_timeout_ms}",
            f"--grpc-keepalive-permit-without-calls={flag(self.keepalive_permit_without_calls)}",
            f"--grpc-http2-max-pings-without-data={self.http2_max_pings_without_data}",
            "--grpc-http2-min-recv-ping-interval-without-data="
            f"{self.http2_min_recv_ping_interval_without_data_ms}",
            f"--grpc-http2-max-ping-strikes={self.http2_max_ping_strikes}",
            f"--grpc-infer-response-compression-level={level}",
            f"--grpc-infer-allocation-pool-size={self.infer_allocation_pool_size}",
            f"--grpc-header-forward-pattern={self.forward_header_pattern}",
        ]


@dataclass
class MetricsOptions:
    address: str = "0.0.0.0"
    port: int = 8002
    thread_count: int = 1

    def __post_init__(self) -> None:
        check_fields(self, {"thread_count": 1})

    def args(self) -> list[str]:
        """The despina-metrics-prometheus flags of these options."""
        return [
            "--allow-metrics=true",
            "--metrics-on-http-port=false",
            f"--metrics-address={self.address}",
            f"--metrics-port={self.port}",
        ]
