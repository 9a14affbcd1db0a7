"""Loading a PyTorch model file, chosen by its suffix:

- ``.pt2``: a ``torch.export`` program (``torch.export.save``); its graph declares data
  types and shapes, so configs are auto-completed and checked like ONNX ones;
- ``.py``: a ``model.py`` defining one ``torch.nn.Module`` subclass (built with no
  arguments), with the state dict in ``model.pt`` beside it when that file exists;
- anything else (``model.pt``): a TorchScript module (``torch.jit.save``).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from despina import ConfigError, DespinaError, Internal, TensorSpec

from despina_backend_torch.convert import datatype_of_torch

_module_ids = itertools.count()
TORCHSCRIPT_DEPRECATION = r"`torch\.jit\.load` is deprecated"


@dataclass
class LoadedModel:
    """A callable module and what is known of its signature."""

    module: Any
    #: forward()'s parameter names in order, and how many leading ones are required.
    arg_names: list[str]
    required: int
    #: Declared inputs/outputs (torch.export programs only; None otherwise).
    inputs: list[TensorSpec] | None = None
    outputs: list[TensorSpec] | None = None


def load_model(path: Path, device: str | None, model: str, label: str) -> LoadedModel:
    """Load ``path`` onto ``device`` (None: where the file puts it).

    Raises ConfigError when the file is missing or unusable, Internal when torch fails
    to read it; both name the model and the file.
    """
    if not path.is_file():
        raise ConfigError(f"model '{model}': model file '{label}' not found")
    try:
        if path.suffix == ".pt2":
            return _exported(path, device)
        if path.suffix == ".py":
            return _module_file(path, device, model, label)
        return _torchscript(path, device)
    except DespinaError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        detail = str(exc).replace(str(path), label).strip().splitlines()
        raise Internal(
            f"model '{model}': torch cannot load '{label}': {type(exc).__name__}: "
            f"{detail[0] if detail else ''}"
        ) from None


def _torchscript(path: Path, device: str | None) -> LoadedModel:
    import torch

    # Serving TorchScript is this backend's purpose (Triton's pytorch_libtorch platform);
    # torch's deprecation notice would only alarm operators, so exactly it is silenced.
    warnings.filterwarnings("ignore", TORCHSCRIPT_DEPRECATION, DeprecationWarning)
    module = torch.jit.load(str(path), map_location=device)  # type: ignore[no-untyped-call]
    module.eval()
    arguments = module.forward.schema.arguments[1:]
    names = [a.name for a in arguments]
    required = sum(1 for a in arguments if not a.has_default_value())
    return LoadedModel(module, names, required)


def _exported(path: Path, device: str | None) -> LoadedModel:
    import torch

    program = torch.export.load(str(path))
    signature = program.graph_signature
    nodes = {node.name: node for node in program.graph.nodes}
    inputs = [_spec(name, nodes[name]) for name in signature.user_inputs]
    outputs = [_spec(f"OUTPUT__{i}", nodes[name]) for i, name in enumerate(signature.user_outputs)]
    module = program.module()
    if device is not None:
        module = module.to(device)
    names = [spec.name for spec in inputs]
    return LoadedModel(module, names, len(names), inputs, outputs)


def _spec(name: str, node: Any) -> TensorSpec:
    value = node.meta["val"]
    shape = tuple(d if isinstance(d, int) else -1 for d in value.shape)
    return TensorSpec(name, datatype_of_torch(value.dtype), shape)


def _module_file(path: Path, device: str | None, model: str, label: str) -> LoadedModel:
    import torch

    name = f"despina_torch_model_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    classes = [
        value
        for value in vars(source).values()
        if isinstance(value, type)
        and issubclass(value, torch.nn.Module)
        and value.__module__ == name
    ]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise ConfigError(
            f"model '{model}': '{label}' must define exactly one torch.nn.Module subclass (found {found})"
        )
    module = classes[0]()
    weights = path.with_name("model.pt")
    if weights.is_file():
        module.load_state_dict(torch.load(weights, map_location=device or "cpu", weights_only=True))
    module.eval()
    if device is not None:
        module = module.to(device)
    parameters = list(inspect.signature(module.forward).parameters.values())
    required = sum(1 for p in parameters if p.default is inspect.Parameter.empty)
    return LoadedModel(module, [p.name for p in parameters], required)
