"""The config's ``runtime`` field, checked once the backend is resolved, with Triton's
texts (``qa/L0_model_config`` special cases ``invalid_runtime`` and ``runtime_escape``),
over HTTP on a real server: the backend's own library name loads, any other fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import toy_backend
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_frontend_http")


@pytest.mark.parametrize(
    ("runtime", "refusal"),
    [
        ("", None),
        ("libtriton_toy.so", None),
        (
            "__invalid_runtime__",
            "unable to find backend library '__invalid_runtime__' for model 'm'",
        ),
        (
            "../dummy_runtime/libtriton_toy.so",
            "backend library name '../dummy_runtime/libtriton_toy.so' escapes backend directory, "
            "for model 'm', check model config runtime field",
        ),
        # clients are told no absolute path (the log has it)
        ("/opt/libtriton_toy.so", "escapes backend directory, for model 'm'"),
    ],
)
def test_runtime_names_the_backend_library(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    runtime: str,
    refusal: str | None,
) -> None:
    config = toy_backend.toy_config(extra=f'runtime: "{runtime}"' if runtime else "")
    model_repository.add("m", config, {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, args=["--model-control-mode=explicit"], plugins=[toy_backend]
    )
    with httpclient.InferenceServerClient(running.http_url) as client:
        if refusal is None:
            client.load_model("m")
            assert client.is_model_ready("m")
            return
        with pytest.raises(InferenceServerException) as info:
            client.load_model("m")
        assert refusal in info.value.message()
        assert not client.is_model_ready("m")
