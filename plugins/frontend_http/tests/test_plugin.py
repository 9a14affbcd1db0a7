"""The plugin is found through its entry point and adds tritonserver's HTTP flags."""

from __future__ import annotations

from despina.plugin.manager import create_plugins
from despina.serving.flags import build_serve_parser, parse_settings


def test_discovered_through_entry_point() -> None:
    plugins = create_plugins()
    rows = {row["name"]: row for row in plugins.describe()}
    assert rows["http"]["distribution"] == "despina-frontend-http"
    assert rows["http"]["provides"]["frontends"] == ["http"]


def test_flags_have_tritonserver_names_and_defaults() -> None:
    settings = parse_settings([], create_plugins())
    assert settings.allow_http is True
    assert settings.http_port == 8000
    assert settings.http_address == "0.0.0.0"
    assert settings.reuse_http_port is False
    assert settings.http_restricted_api == []
    assert settings.allow_client_shm is False
    parser, inert = build_serve_parser(create_plugins())
    assert "http_port" not in inert and "http_thread_count" not in inert
    assert "event loop" in parser.format_help()
