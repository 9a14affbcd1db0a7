"""Schemathesis against the OpenAPI description Despina ships
(``despina_frontend_http/openapi/kserve_v2.yaml``) and a live server: every operation,
cases generated from the schemas (valid and invalid), no server error, and answers that
conform to the description (status codes, content types, response schemas)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from typing import Any

import fuzzkit
import pytest
from hypothesis import settings

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

SPEC = files("despina_frontend_http") / "openapi" / "kserve_v2.yaml"
schema = schemathesis.openapi.from_path(str(SPEC))

#: Documented server errors: none (a CUDA registration without GPU support is a 400).
DOCUMENTED_5XX: set[tuple[int, str]] = set()


@schemathesis.check
def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    status = response.status_code
    if status < 500:
        fuzzkit.record("openapi", f"{status // 100}xx")
    elif (status, case.operation.path) in DOCUMENTED_5XX:
        fuzzkit.record("openapi", f"documented {status}")
    else:
        fuzzkit.record("openapi")
        fuzzkit.TALLY["openapi"]["5xx"] += 1
        url = response.request.url
        raise AssertionError(f"{status} from {case.method} {url}: {response.text[:300]}")
    return None


#: Checks of every answer against the description (status codes, content types, body
#: schemas); a mismatch fails the run.
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of its own (explicit model control: load/unload are served)."""
    import toy_backend
    from conftest import LOCAL, build_repository
    from despina.testing import start_server

    root = build_repository(tmp_path_factory.mktemp("openapi") / "models")
    running = start_server(
        root, [*LOCAL, "--model-control-mode=explicit", "--load-model=*"], plugins=[toy_backend]
    )
    yield f"http://{running.http_url}"
    probe = fuzzkit.HttpProbe(running.http_port)
    probe.check("openapi-final")
    probe.close()
    running.stop()


@schema.parametrize()
@settings(max_examples=fuzzkit.examples(8))
def test_openapi(case: Any, base_url: str) -> None:
    case.call_and_validate(
        base_url=base_url,
        timeout=fuzzkit.TIMEOUT,
        checks=[no_server_error, *CONFORMANCE],
    )


def test_unknown_path_with_newline_answers_json(base_url: str) -> None:
    """Found by this run: a decoded newline missed the catch-all route (aiohttp's text 404)."""
    import requests

    answer = requests.get(f"{base_url}/v2/x%0Ay", timeout=fuzzkit.TIMEOUT)
    assert answer.status_code == 404
    assert answer.headers["Content-Type"] == "application/json", answer.text


def test_trace_setting_list_of_nulls_is_refused(base_url: str) -> None:
    """Found by this run: nulls in a trace setting's list were stored as "None"."""
    import requests

    answer = requests.post(
        f"{base_url}/v2/trace/setting", json={"trace_mode": [None]}, timeout=fuzzkit.TIMEOUT
    )
    assert answer.status_code == 400, answer.text
