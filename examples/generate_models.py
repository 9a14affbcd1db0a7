"""Generate the framework example models in ``examples/model_repository``.

Each is Triton's ``add_sub`` example (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
FP32, 16 values per batch item) in a framework's own format:

- ``onnx_add_sub``: ``1/model.onnx`` built with ``onnx.helper``; no config.pbtxt (the
  onnxruntime backend auto-completes it, max_batch_size 4 with dynamic batching);
- ``torch_add_sub``: ``1/model.pt`` scripted with ``torch.jit``, with a config.pbtxt (a
  TorchScript file declares no types or shapes) using Triton's ``INPUT__0`` naming;
- ``torch_export_add_sub``: ``1/model.pt2``, a ``torch.export`` program with a dynamic
  batch dimension; its config.pbtxt only names the file (the rest is auto-completed);
- ``openvino_add_sub``: ``1/model.xml`` + ``model.bin`` converted from the ONNX graph with
  ``openvino.convert_model``; no config.pbtxt.

Run from the repository root: ``.venv/bin/python examples/generate_models.py``.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "model_repository"
WIDTH = 16

TORCH_CONFIG = """\
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }},
  {{ name: "INPUT__1" data_type: TYPE_FP32 dims: [ {width} ] }}
]
output [
  {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }},
  {{ name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ {width} ] }}
]
dynamic_batching {{ }}
"""


def onnx_add_sub() -> bytes:
    """The add_sub graph as ONNX bytes, with a dynamic batch dimension."""
    from onnx import TensorProto, helper

    shape = ["batch", WIDTH]
    io = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [io("INPUT0", TensorProto.FLOAT, shape), io("INPUT1", TensorProto.FLOAT, shape)],
        [io("OUTPUT0", TensorProto.FLOAT, shape), io("OUTPUT1", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by older onnxruntime / OpenVINO releases too
    return bytes(model.SerializeToString())


def write_onnx(folder: Path, graph: bytes) -> None:
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.onnx").write_bytes(graph)


def torch_add_sub() -> object:
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    return AddSub()


def write_torch(folder: Path) -> None:
    import torch

    (folder / "1").mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated upstream
        torch.jit.save(torch.jit.script(torch_add_sub()), str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(TORCH_CONFIG.format(width=WIDTH))


def write_torch_export(folder: Path) -> None:
    import torch

    example = (torch.ones(2, WIDTH), torch.ones(2, WIDTH))
    batch = torch.export.Dim("batch", max=1024)
    program = torch.export.export(torch_add_sub(), example, dynamic_shapes=({0: batch}, {0: batch}))
    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(folder / "1" / "model.pt2"))
    (folder / "config.pbtxt").write_text(
        'backend: "pytorch"\ndefault_model_filename: "model.pt2"\n'
    )


def write_openvino(folder: Path, graph: bytes) -> None:
    import openvino as ov

    (folder / "1").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "model.onnx"
        source.write_bytes(graph)
        ov.save_model(ov.convert_model(str(source)), str(folder / "1" / "model.xml"))


def main() -> None:
    graph = onnx_add_sub()
    write_onnx(ROOT / "onnx_add_sub", graph)
    write_torch(ROOT / "torch_add_sub")
    write_torch_export(ROOT / "torch_export_add_sub")
    write_openvino(ROOT / "openvino_add_sub", graph)
    for path in sorted(ROOT.glob("*_add_sub/**/*")):
        if path.is_file():
            print(f"{path.relative_to(ROOT)}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
