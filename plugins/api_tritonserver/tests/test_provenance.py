"""How Despina's ``tritonserver`` and ``tritonfrontend`` are told from NVIDIA's: the
``__despina__`` flag, a ``+despina`` version, and a warning where NVIDIA's distribution is
installed in the same environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tritonfrontend
import tritonserver
from tritonserver._provenance import warn_if_shadowing


def test_modules_say_whose_they_are() -> None:
    for module in (tritonserver, tritonfrontend):
        assert module.__despina__ is True
        assert module.__version__.startswith("2.71.0+despina.")
    assert not hasattr(tritonserver, "_c")  # NVIDIA's C binding is not here


def test_no_warning_without_nvidia_distribution() -> None:
    warn_if_shadowing("tritonserver")  # the test run turns warnings into errors


def test_warns_where_nvidia_distribution_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "tritonserver-2.71.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tritonserver\nVersion: 2.71.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with pytest.warns(RuntimeWarning, match=r"NVIDIA's 'tritonserver' 2\.71\.0 is installed"):
        warn_if_shadowing("tritonserver")
