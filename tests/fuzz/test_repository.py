"""Model repository (explicit model control): random and mutated ``config.pbtxt`` files
loaded through the load API, and load overrides (``config`` JSON strings, ``file:<path>``
keys with traversal, absolute, long, NUL and unicode paths). Never a 5xx, never a file
written outside the override's temporary folder, and the server keeps serving."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fuzzkit
import pytest
from fuzzkit import ServerError, b64, fail, record
from hypothesis import example, given, settings, strategies as st
from strategies import INTERESTING_INTS, json_values, mutated_json

TYPES = [
    "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8",
    "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64",
    "TYPE_STRING", "TYPE_BF16", "TYPE_INVALID",
]  # fmt: skip
#: Instance counts are bounded: a config asking for 2^31 instances is served as asked
#: (Triton does the same), which is a resource matter of the config's author, not a parser's.
COUNTS = st.integers(-2, 4)
DIMS = st.lists(st.sampled_from([-1, 0, 1, 4, 16, -2, 2**31, 2**63 - 1]), max_size=3)


@pytest.fixture(scope="module")
def repo(repository_server: Any) -> Iterator[tuple[Any, fuzzkit.HttpProbe]]:
    probe = fuzzkit.HttpProbe(repository_server.running.http_port)
    yield repository_server, probe
    probe.check("repository-final")
    probe.close()


def load(
    target: str, port: int, probe: fuzzkit.HttpProbe, name: str, body: bytes, what: str = ""
) -> int:
    path = f"/v2/repository/models/{quote(name, safe='')}/load"
    data = fuzzkit.http_request("POST", path, [("Content-Type", "application/json")], body)
    try:
        statuses, bodies = fuzzkit.exchange_answers(port, data, expect=1)
    except fuzzkit.Hang as exc:
        fail(target, "hangs", exc)
    status = statuses[-1] if statuses else 0
    record(target, str(status) if status else "closed")
    if status >= 500 and not fuzzkit.known(target, status, bodies[-1]):
        fail(target, "5xx", ServerError(f"{status} loading {name!r} with {body[:600]!r} {what}"))
    probe.check(target)
    return status


# -- config.pbtxt ---------------------------------------------------------------------------

#: Found by these targets and fixed since (plain regression tests below).
UNKNOWN_BACKEND = "a config naming a backend that is not installed is a 400 (was 503)"
NO_VERSION = "a load override whose files hold no version folder is a 400 (was 503)"
TEMP_LEAK = (
    "a load with file overrides that fails (a refused path, a bad config, a failing model) "
    "left its despina-override-* temporary folder behind (fixed: despina/models/manager.py removed it "
    "only when a loaded version retires): every failed request leaks a folder"
)
DIRECTORY_PATH = (
    "a file override whose path names a folder that another override creates ('file:1/' "
    "beside 'file:1/model.toy') failed with 500 (fixed): despina/models/manager.py "
    "writes bytes onto the folder (IsADirectoryError); it should be a 400"
)


def test_unknown_backend_is_a_client_error(repo: tuple[Any, fuzzkit.HttpProbe]) -> None:
    server, _ = repo
    folder = server.repository / "fz_backend"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text('backend: "nope"')
    data = fuzzkit.http_request("POST", "/v2/repository/models/fz_backend/load", [], b"")
    statuses, bodies = fuzzkit.exchange_answers(server.running.http_port, data, expect=1)
    assert statuses == [400], bodies


def tensor(name: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, t, d, extra: f'{{ name: "{n}" data_type: {t} dims: {d} {extra} }}',
        name,
        st.sampled_from(TYPES) | st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", max_size=10),
        DIMS.map(str),
        st.sampled_from(
            ["", "optional: true", "reshape: { shape: [ ] }", "reshape: { shape: [ 2, 2 ] }",
             "allow_ragged_batch: true", "is_shape_tensor: true", "format: FORMAT_NCHW",
             'label_filename: "../labels.txt"', 'label_filename: "/etc/passwd"']
        ),
    )  # fmt: skip


SECTIONS = [
    st.builds(lambda n: f"max_batch_size: {n}", st.sampled_from(INTERESTING_INTS)),
    st.builds(
        lambda ts: f"input [ {', '.join(ts)} ]",
        st.lists(tensor(st.sampled_from(["INPUT0", "INPUT1", "X", ""])), max_size=3),
    ),
    st.builds(
        lambda ts: f"output [ {', '.join(ts)} ]",
        st.lists(tensor(st.sampled_from(["OUTPUT0", "OUTPUT1", "INPUT0"])), max_size=3),
    ),
    st.builds(
        lambda k, c: f"instance_group [ {{ kind: {k} count: {c} }} ]",
        st.sampled_from(["KIND_CPU", "KIND_GPU", "KIND_MODEL", "KIND_AUTO", "KIND_X"]),
        COUNTS,
    ),
    st.builds(
        lambda p, d: f"dynamic_batching {{ preferred_batch_size: {p} max_queue_delay_microseconds: {d} }}",
        st.lists(st.sampled_from([-1, 0, 1, 2, 4, 8, 64, 2**31]), max_size=3).map(str),
        st.sampled_from([0, 100, -1, 2**63 - 1]),
    ),
    st.sampled_from(
        [
            "version_policy: { all { } }",
            "version_policy: { latest { num_versions: 0 } }",
            "version_policy: { latest { num_versions: 2 } }",
            "version_policy: { specific { versions: [ 1 ] } }",
            "version_policy: { specific { versions: [ 7, -1 ] } }",
            'parameters { key: "x" value: { string_value: "y" } }',
            'default_model_filename: "../../x.toy"',
            'default_model_filename: "/etc/passwd"',
            "sequence_batching { max_sequence_idle_microseconds: 1000 }",
            'sequence_batching { control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ] }',
            'model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]',
            'model_warmup [ { name: "w" batch_size: 99999 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "../../etc/passwd" } } } ]',
            'ensemble_scheduling { step [ { model_name: "toy" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }',
            'ensemble_scheduling { step [ { model_name: "fz" model_version: -1 } ] }',
            "response_cache { enable: true }",
            "optimization { priority: PRIORITY_MAX }",
            'platform: "ensemble"',
            'backend: "python"',
            'name: "other"',
            'cc_model_filenames { key: "x" value: "../y" }',
        ]
    ),
]  # fmt: skip

VOCAB = [
    "{", "}", "[", "]", ":", ",", '"', "'", "-", "0", "1", "-1", "9" * 30, "name", "input",
    "output", "dims", "data_type", "TYPE_FP32", "backend", '"toy"', "max_batch_size",
    "instance_group", "count", "#", "\\", "\n", "\x00", "é", "inf", "nan", "true",
]  # fmt: skip


@st.composite
def configs(draw: st.DrawFn) -> str:
    """Structured configs of the toy backend (random sections), their tokens mutated, or
    random text."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.text(max_size=200))
    backend = draw(st.sampled_from(['backend: "toy"'] * 4 + ['backend: "nope"', ""]))
    parts = [backend, *draw(st.lists(st.one_of(*SECTIONS), max_size=6))]
    text = "\n".join(parts)
    if choice < 4:
        tokens = re.findall(r'"[^"]*"|\S+|\n', text)
        for _ in range(draw(st.integers(1, 5))):
            op = draw(st.sampled_from(["delete", "replace", "insert", "dup"]))
            at = draw(st.integers(0, max(0, len(tokens) - 1)))
            if op == "insert" or not tokens:
                tokens.insert(at, draw(st.sampled_from(VOCAB) | st.text(max_size=5)))
            elif op == "delete":
                del tokens[at]
            elif op == "replace":
                tokens[at] = draw(st.sampled_from(VOCAB) | st.text(max_size=5))
            else:
                tokens.insert(at, tokens[at])
        text = " ".join(tokens)
    return text


@settings(max_examples=fuzzkit.examples(60))
@given(config=configs())
@example(config='backend: "toy" version_policy: { specific { versions: [ 7 ] } }')
def test_config_pbtxt(repo: tuple[Any, fuzzkit.HttpProbe], config: str) -> None:
    server, probe = repo
    folder = server.repository / "fz"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.toy").write_text("")
    (folder / "config.pbtxt").write_bytes(config.encode("utf-8", "surrogatepass"))
    load("config-pbtxt", server.running.http_port, probe, "fz", b"", f"config.pbtxt {config!r}")


# -- load overrides ---------------------------------------------------------------------------


def load_body(params: dict[str, Any]) -> bytes:
    return json.dumps({"parameters": params}).encode()


def test_override_without_version_folder_is_a_client_error(
    repo: tuple[Any, fuzzkit.HttpProbe],
) -> None:
    server, _ = repo
    body = load_body({"config": json.dumps(TOY_JSON), "file:model.toy": b64(b"")})
    data = fuzzkit.http_request("POST", "/v2/repository/models/fz_nover/load", [], body)
    statuses, bodies = fuzzkit.exchange_answers(server.running.http_port, data, expect=1)
    assert statuses == [400], bodies


def test_override_path_naming_a_folder_is_a_client_error(
    repo: tuple[Any, fuzzkit.HttpProbe],
) -> None:
    server, _ = repo
    body = load_body(
        {"config": json.dumps(TOY_JSON), "file:1/model.toy": b64(b""), "file:1/": b64(b"")}
    )
    data = fuzzkit.http_request("POST", "/v2/repository/models/fz_dir/load", [], body)
    statuses, bodies = fuzzkit.exchange_answers(server.running.http_port, data, expect=1)
    assert statuses == [400], bodies


def test_failed_override_load_leaves_no_temp_folder(repo: tuple[Any, fuzzkit.HttpProbe]) -> None:
    server, _ = repo
    before = set(server.temp.iterdir())
    body = load_body(
        {"config": json.dumps(TOY_JSON), "file:1/a": b64(b"x"), "file:../x": b64(b"x")}
    )
    data = fuzzkit.http_request("POST", "/v2/repository/models/fz_leak/load", [], body)
    statuses, _ = fuzzkit.exchange_answers(server.running.http_port, data, expect=1)
    assert statuses == [400]
    assert set(server.temp.iterdir()) == before


MARKER = "FZESCAPE"
TOY_JSON: dict[str, Any] = {
    "backend": "toy",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
}


def override_paths(sandbox: Path) -> st.SearchStrategy[str]:
    absolute = str(sandbox / "abs" / MARKER)
    return st.one_of(
        st.sampled_from(["1/model.toy", "model.toy", "config.pbtxt", "1/", "", ".", "1/.."]),
        st.builds(lambda k, tail: "../" * k + tail, st.integers(1, 12), st.sampled_from([MARKER, f"x/{MARKER}", f"1/{MARKER}"])),
        st.builds(lambda k: "1/" + "../" * k + MARKER, st.integers(1, 12)),
        st.sampled_from(
            [absolute, "/" + MARKER, "//" + MARKER, "~/" + MARKER, "..\\" + MARKER,
             "1/\x00" + MARKER, "\x00", MARKER + "\x00/../../..", "a" * 300, "a/" * 200 + MARKER,
             "é/" + MARKER, "\u202e" + MARKER, "1/./../../" + MARKER, "C:\\" + MARKER]
        ),
        st.text(max_size=30),
    )  # fmt: skip


def escaped_targets(temp: Path, name: str, relative: str) -> list[Path]:
    """Where ``relative`` would land outside its model folder ``temp/<override>/name``
    if it were joined without checks (glob patterns where the override folder's name,
    unknown here, is part of it)."""
    if "\x00" in relative or not relative:
        return []
    base = temp / "__X__" / (name or "_")
    if len(str(base / relative)) > 3000:
        return []
    target = os.path.normpath(base / relative)
    inside = str(base)
    if target == inside or target.startswith(inside + os.sep):
        return []
    return [Path(p) for p in [target.replace("__X__", "*")]]


def exists(pattern: Path) -> bool:
    try:
        if "*" in str(pattern):
            return any(Path("/").glob(str(pattern).lstrip("/")))
        return pattern.exists()
    except (OSError, ValueError):
        return False


def snapshot(root: Path, skip: Path) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        if Path(folder) == skip:
            dirs[:] = []
            continue
        found.update(os.path.join(folder, f) for f in files)
    return found


NAMES = st.sampled_from(["ovr"] * 6 + ["toy_bytes", "..", ".", "a/b", "\x00", "é", "x" * 300, " "])


@st.composite
def overrides(draw: st.DrawFn, sandbox: Path) -> tuple[str, dict[str, Any]]:
    name = draw(NAMES)
    params: dict[str, Any] = {}
    config_kind = draw(st.integers(0, 5))
    if config_kind < 3:
        params["config"] = json.dumps(draw(mutated_json(TOY_JSON)))
    elif config_kind == 3:
        params["config"] = draw(st.text(max_size=60) | json_values.map(json.dumps))
    elif config_kind == 4:
        params["config"] = draw(json_values)
    for path in draw(st.lists(override_paths(sandbox), max_size=4)):
        content = draw(st.binary(max_size=32))
        value: Any = b64(content)
        if draw(st.integers(0, 9)) == 0:
            value = draw(st.sampled_from(["!!", "a", "YQ", "YQ==="]) | json_values)
        params["file:" + path] = value
    if draw(st.integers(0, 9)) == 0:
        params[draw(st.text(max_size=8))] = draw(json_values)
    return name, params


def test_load_overrides(repo: tuple[Any, fuzzkit.HttpProbe]) -> None:
    server, probe = repo
    sandbox: Path = server.sandbox
    temp: Path = server.temp
    (sandbox / "abs").mkdir(exist_ok=True)

    @settings(max_examples=fuzzkit.examples(80))
    @given(case=overrides(sandbox))
    @example(case=("ovr", {"config": json.dumps(TOY_JSON), "file:../../" + MARKER: b64(b"x")}))
    @example(case=("ovr", {"config": json.dumps(TOY_JSON), "file:1/\x00x": b64(b"x")}))
    @example(case=("ovr", {"config": json.dumps(TOY_JSON), "file:" + "a" * 300: b64(b"x")}))
    @example(case=("ovr", {"config": json.dumps(TOY_JSON), "file:1/model.toy": b64(b"")}))
    def run(case: tuple[str, dict[str, Any]]) -> None:
        name, params = case
        targets = [
            str(t)
            for key in params
            if key.startswith("file:")
            for t in escaped_targets(temp, name, key[5:])
        ]
        existed = {t for t in targets if exists(Path(t))}  # e.g. '../..' is the temp folder
        before = snapshot(sandbox, temp)
        body = json.dumps({"parameters": params}).encode()
        load("load-overrides", server.running.http_port, probe, name, body)
        after = snapshot(sandbox, temp)
        written = after - before
        escaped = [t for t in targets if t not in existed and exists(Path(t))]
        if written or escaped:
            fail(
                "load-overrides",
                "5xx",
                ServerError(f"files written outside the override folder: {written or escaped}"),
            )
        left = [p for p in temp.iterdir() if p.name.startswith("despina-override-")]
        fuzzkit.TALLY["load-overrides"]["max-temp-dirs"] = max(
            fuzzkit.TALLY["load-overrides"]["max-temp-dirs"], len(left)
        )

    run()
