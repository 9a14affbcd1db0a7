"""The plugin is discovered through its entry point and owns tritonserver's gRPC flags."""

from __future__ import annotations

from despina.plugin.manager import create_plugins
from despina.serving.flags import parse_settings
from despina.serving.server import Registry


def test_discovered_through_entry_point() -> None:
    plugins = create_plugins()
    registry = Registry.build(plugins)
    from despina_frontend_grpc.frontend import GrpcFrontend

    assert registry.frontends["grpc"] is GrpcFrontend
    rows = {row["name"]: row for row in plugins.describe()}
    assert rows["grpc"]["distribution"] == "despina-frontend-grpc"


def test_flags_have_tritonserver_defaults_and_are_not_inert() -> None:
    settings = parse_settings(["--grpc-keepalive-time=1000"], create_plugins())
    assert settings.allow_grpc is True
    assert settings.grpc_port == 8001
    assert settings.grpc_address == "0.0.0.0"
    assert settings.grpc_keepalive_time == 1000
    assert settings.grpc_keepalive_timeout == 20000
    assert settings.grpc_infer_response_compression_level == "none"
    assert settings.inert_flags_given == []


def test_options_are_read_once() -> None:
    from despina_frontend_grpc.options import GrpcOptions

    flags = parse_settings(
        ["--grpc-restricted-protocol=health,metadata:probe=yes", "--grpc-max-connection-age=5"],
        create_plugins(),
    )
    options = GrpcOptions.from_namespace(flags)
    assert options.port == 8001 and options.max_connection_age == 5
    assert options.max_connection_age_grace is None
    assert options.restrictions["metadata"].header == "triton-grpc-protocol-probe"
