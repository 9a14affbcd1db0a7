"""Log and trace settings that clients change at run time."""

from __future__ import annotations

import logging

import pytest
from despina.errors import InvalidArgument
from despina.plugin.manager import create_plugins
from despina.serving.flags import parse_settings
from despina.serving.runtime_settings import LogSettings, TraceSettings
from despina.tracing.config import TraceConfig


def test_log_levels_change_the_despina_logger_at_run_time() -> None:
    settings = LogSettings.from_settings(parse_settings(["--log-info=false"], create_plugins()))
    logger = logging.getLogger("despina")
    assert logger.getEffectiveLevel() == logging.WARNING
    settings.update({"log_verbose_level": 1})
    assert logger.getEffectiveLevel() == logging.DEBUG
    settings.update({"log_verbose_level": 0, "log_warning": False})
    assert logger.getEffectiveLevel() == logging.ERROR
    settings.update({"log_info": True})
    assert logger.getEffectiveLevel() == logging.INFO
    assert settings.as_dict()["log_info"] is True


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"log_file": "/etc/passwd"}, "log_file cannot be changed at run time"),
        ({"log_info": "yes"}, "expected a boolean for 'log_info'"),
        ({"log_verbose_level": -1}, "non-negative integer"),
        ({"log_format": "json"}, "unknown log format 'json'"),
        ({"colour": True}, "unknown log setting 'colour'"),
    ],
)
def test_bad_log_settings_are_refused(changes: dict[str, object], message: str) -> None:
    settings = LogSettings()
    with pytest.raises(InvalidArgument, match=message):
        settings.update(changes)


def test_trace_settings_per_model_fall_back_to_the_global_ones() -> None:
    settings = TraceSettings(TraceConfig().extension_values())
    assert settings.update({"trace_rate": 10}, model="m")["trace_rate"] == ["10"]
    assert settings.get()["trace_rate"] == ["1000"]
    assert settings.update({"trace_rate": None}, model="m")["trace_rate"] == ["1000"]
    with pytest.raises(InvalidArgument, match="trace_file cannot be changed"):
        settings.update({"trace_file": "/tmp/x"})
