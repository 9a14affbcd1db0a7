"""Triton's protobuf schemas built from tritonclient's generated modules without importing
them: the same names as ``model_config_pb2`` / ``service_pb2``, the very same classes when a
process imports both (either first), and no grpcio."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
first, = sys.argv[1:]
if first == "tritonclient":
    import tritonclient.grpc.model_config_pb2 as mc_gen, tritonclient.grpc.service_pb2 as sv_gen
from despina.triton_proto import grpc_service, model_config
print("grpc" in sys.modules, end=" ")
if first != "tritonclient":
    import tritonclient.grpc.model_config_pb2 as mc_gen, tritonclient.grpc.service_pb2 as sv_gen
for ours, generated in ((model_config, mc_gen), (grpc_service, sv_gen)):
    names = {n for n in dir(generated) if not n.startswith("_") and n != "model__config__pb2"}
    assert names <= set(dir(ours)), names - set(dir(ours))
    for name in names - {"DESCRIPTOR"}:
        assert getattr(ours, name) is getattr(generated, name) or (
            getattr(ours, name).DESCRIPTOR is getattr(generated, name).DESCRIPTOR), name
config = model_config.ModelConfig(name="m", max_batch_size=2)
config.input.add(name="x", data_type=model_config.TYPE_FP32, dims=[4])
assert mc_gen.ModelConfig.FromString(config.SerializeToString()) == config
assert model_config.DataType.Name(model_config.TYPE_BF16) == "TYPE_BF16"
print("ok")
"""


@pytest.mark.parametrize("first", ["despina", "tritonclient"])
def test_schemas_are_tritonclients_own(first: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK, first], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    loaded_grpc = first == "tritonclient"  # tritonclient.grpc's package import loads it
    assert out.stdout.split() == [str(loaded_grpc), "ok"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    from despina.triton_proto import model_config

    with pytest.raises(AttributeError, match=r"model_config\.proto defines no 'NoSuchMessage'"):
        model_config.NoSuchMessage  # noqa: B018
