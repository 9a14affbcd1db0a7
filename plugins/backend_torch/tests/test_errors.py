"""Errors particular to PyTorch: configs that do not fit forward(), model.py modules,
results that do not fit the outputs, strings. Corrupt files and run-time failures every
backend shares run in test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
KEEP_GOING = ["--exit-on-error=false"]


def config(inputs: list[tuple[str, str]], outputs: list[tuple[str, str]], mbs: int = 8) -> str:
    def tensors(items: list[tuple[str, str]]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ 4 ] }}' for n, t in items)

    return (
        f'platform: "pytorch_libtorch"\nmax_batch_size: {mbs}\n'
        f"input [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n"
    )


FP32 = "TYPE_FP32"
OUTS = [("OUTPUT__0", FP32), ("OUTPUT__1", FP32)]
LOAD_ERRORS = {
    "more_inputs_than_arguments": (
        config([("a", FP32), ("b", FP32), ("image", FP32)], OUTS),
        "input 'image' matches no forward() argument (a, b): the model takes 2",
    ),
    "index_out_of_range": (
        config([("INPUT__0", FP32), ("INPUT__5", FP32)], OUTS),
        "input 'INPUT__5' matches no forward() argument",
    ),
    "missing_argument": (
        config([("a", FP32)], OUTS),
        "forward() argument(s) b have no config input",
    ),
    "same_argument_twice": (
        config([("INPUT__0", FP32), ("X__0", FP32)], OUTS),
        "input 'X__0' binds to an argument another input binds to",
    ),
}


@pytest.mark.parametrize("case", list(LOAD_ERRORS))
def test_config_that_does_not_fit_forward_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models, case: str
) -> None:
    text, fragment = LOAD_ERRORS[case]
    model_repository.add("broken", text, {"1/model.pt": torch_models["add_sub"]()})
    row = served(despina_server(model_repository.root, KEEP_GOING)).index()["broken"]
    assert row["state"] == "UNAVAILABLE"
    assert "model 'broken', file '1/model.pt'" in row["reason"]
    assert fragment in row["reason"]


def test_tensors_named_neither_way_bind_in_config_order(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    http_client,
    torch_models,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Triton's fallback (its QA add_sub_pytorch: INPUT0/INPUT1 for forward(a, b)): the
    config's first input is forward()'s first argument, with Triton's warning; outputs
    named neither way are the returned tuple's in config order."""
    text = config([("second", FP32), ("first", FP32)], [("SUM", FP32), ("DIFF", FP32)])
    model_repository.add("ordered", text, {"1/model.pt": torch_models["add_sub"]()})
    client = http_client(despina_server(model_repository.root))
    x, y = np.arange(4, dtype=np.float32).reshape(1, 4), np.ones((1, 4), np.float32)
    inputs = [httpclient.InferInput("first", [1, 4], "FP32").set_data_from_numpy(y)]
    inputs.append(httpclient.InferInput("second", [1, 4], "FP32").set_data_from_numpy(x))
    result = client.infer("ordered", inputs)
    assert result.as_numpy("SUM").tolist() == (x + y).tolist()
    assert result.as_numpy("DIFF").tolist() == (x - y).tolist()  # second - first
    assert "Falling back to enforcing strict ordering from model configuration" in caplog.text


def test_export_program_dims_disagreeing_with_config(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    text = config([("a", FP32), ("b", FP32)], OUTS).replace("[ 4 ]", "[ 5 ]")
    text = text.replace(
        'platform: "pytorch_libtorch"', 'backend: "pytorch"\ndefault_model_filename: "model.pt2"'
    )
    model_repository.add("exported", text, {"1/model.pt2": torch_models["add_sub_pt2"]()})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["exported"]["reason"]
    assert "model 'exported', file '1/model.pt2': input 'a' has shape [-1,4] in the model" in reason


def test_model_py_needs_exactly_one_module(
    model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    source = "import torch\nclass A(torch.nn.Module): pass\nclass B(torch.nn.Module): pass\n"
    text = config([("x", FP32)], [("OUTPUT__0", FP32)]).replace(
        'platform: "pytorch_libtorch"', 'backend: "pytorch"\ndefault_model_filename: "model.py"'
    )
    model_repository.add("two", text, {"1/model.py": source})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["two"]["reason"]
    assert "'1/model.py' must define exactly one torch.nn.Module subclass (found A, B)" in reason


@pytest.mark.parametrize(
    ("outputs", "fragment"),
    [
        (
            [("OUTPUT__0", "TYPE_FP64"), ("OUTPUT__1", FP32)],
            "output 'OUTPUT__0' has data type FP32 but the config says FP64",
        ),
        (
            [("sum", FP32), ("difference", FP32), ("extra", FP32)],
            "output 'extra' cannot be found in the model's 2 result(s): it is result 2",
        ),
        ([("OUTPUT__0", FP32), ("OUTPUT__7", FP32)], "output 'OUTPUT__7' cannot be found"),
    ],
    ids=["data_type", "config_order", "index"],
)
def test_outputs_that_do_not_fit_the_result_fail_requests(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    torch_models,
    outputs: list[tuple[str, str]],
    fragment: str,
) -> None:
    model_repository.add(
        "mismatch",
        config([("a", FP32), ("b", FP32)], outputs),
        {"1/model.pt": torch_models["add_sub"]()},
    )
    client = served(despina_server(model_repository.root))
    ones = np.ones((1, 4), np.float32)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("mismatch", {"a": ones, "b": ones})
    assert fragment in str(raised.value)


def test_strings_must_be_one_dimensional(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    text = (
        'platform: "pytorch_libtorch"\n'
        'input [ { name: "words" data_type: TYPE_STRING dims: [ -1, -1 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    model_repository.add("upper", text, {"1/model.pt": torch_models["upper"]()})
    client = served(despina_server(model_repository.root))
    with pytest.raises(InferenceServerException, match="only as a 1-D list of strings") as raised:
        client.infer("upper", {"words": np.array([[b"a", b"b"]], dtype=object)})
    assert raised.value.status() == "400"
    assert client.client.is_model_ready("upper")
