"""Instance groups as Triton completes and checks them, and the instances they make.

:func:`complete` returns the groups with what a config leaves out filled (Triton's
``NormalizeInstanceGroup``): the default group for a config with none, names ``<model>_<index>``, ``KIND_AUTO`` resolved,
counts, and every supported GPU for a ``KIND_GPU`` group that lists none. Unlike Triton,
``KIND_AUTO`` (and the default group) become ``KIND_GPU`` only where the model's backend
can run on a GPU with what is installed (:meth:`despina.plugin.backend.Backend.gpu_support`):
an OpenVINO model, or an ONNX model under a CPU-only onnxruntime, stays on the CPU of a
GPU machine instead of failing to load.

:func:`check` refuses with Triton's texts what cannot be placed: GPUs listed for a
``KIND_CPU`` / ``KIND_MODEL`` group, a ``KIND_GPU`` group without GPUs, an unknown or
unsupported GPU id; and, Despina's own, ``KIND_GPU`` for a backend that cannot use it.

:func:`instance_specs` names instances as Triton does: ``<group>_<n>`` for the n-th of the
group's ``count``, the same name on each of a ``KIND_GPU`` group's GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from despina.errors import ConfigError
from despina.plugin.backend import InstanceSpec
from despina.repository.config import mc

Kind = mc.ModelInstanceGroup.Kind
KIND_AUTO = mc.ModelInstanceGroup.KIND_AUTO
KIND_CPU = mc.ModelInstanceGroup.KIND_CPU
KIND_GPU = mc.ModelInstanceGroup.KIND_GPU
KIND_MODEL = mc.ModelInstanceGroup.KIND_MODEL


def complete(
    config: mc.ModelConfig, gpus: Sequence[int], gpu_support: str | None
) -> list[mc.ModelInstanceGroup]:
    """The completed instance groups of a non-ensemble ``config`` (new messages; the
    config is not changed: :mod:`despina.repository.config_pipeline` writes them into its draft).

    ``gpus``: the CUDA ordinals of the supported GPUs; ``gpu_support``: None when the
    backend can run on them, else why not (then nothing is placed on a GPU by default).
    """
    usable = list(gpus) if gpu_support is None else []
    groups = [_copy(group) for group in config.instance_group]
    if not groups:
        groups.append(mc.ModelInstanceGroup(name=config.name, kind=KIND_AUTO))  # Triton's
    for index, group in enumerate(groups):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == KIND_AUTO:
            listed_ok = all(gid in usable for gid in group.gpus)
            group.kind = KIND_GPU if usable and listed_ok else KIND_CPU
            if group.kind == KIND_CPU and gpu_support is not None:
                del group.gpus[:]  # GPUs named for a backend that cannot use them
        if group.count < 1:
            group.count = 1  # Triton: 2 for onnxruntime on CPU (see the README)
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(usable)
    return groups


def _copy(group: mc.ModelInstanceGroup) -> mc.ModelInstanceGroup:
    copied = mc.ModelInstanceGroup()
    copied.CopyFrom(group)
    return copied


def check(
    config: mc.ModelConfig,
    gpus: Sequence[int],
    gpu_support: str | None,
    min_compute_capability: float,
) -> None:
    """Raise ConfigError (Triton's text) for a completed group that cannot be placed here."""
    for group in config.instance_group:
        _check_group(group, group.name, config.name, gpus, gpu_support, min_compute_capability)


def check_listed(
    config: mc.ModelConfig, gpus: Sequence[int], min_compute_capability: float
) -> None:
    """:func:`check` of what needs no backend, before the backend is resolved: the groups
    that name their kind (not ``KIND_AUTO``) and, for ``KIND_GPU``, list GPUs, named as
    :func:`complete` names them. Triton checks them only once it found the backend library;
    Despina checks them first, so a misplaced group is reported whatever is installed."""
    for index, group in enumerate(config.instance_group):
        if group.kind == KIND_AUTO or (group.kind == KIND_GPU and not group.gpus):
            continue
        name = group.name or f"{config.name}_{index}"
        _check_group(group, name, config.name, gpus, None, min_compute_capability)


def _check_group(
    group: mc.ModelInstanceGroup,
    name: str,
    model: str,
    gpus: Sequence[int],
    gpu_support: str | None,
    min_compute_capability: float,
) -> None:
    where = f"instance group {name} of model {model}"
    if group.kind in (KIND_CPU, KIND_MODEL) and group.gpus:
        raise ConfigError(
            f"{where} has kind {Kind.Name(group.kind)} but specifies one or more GPUs"
        )
    if group.kind != KIND_GPU:
        return
    if gpu_support is not None:
        raise ConfigError(f"{where} has kind KIND_GPU but {gpu_support}")
    if not group.gpus:
        detail = "no GPUs are available" if not gpus else "specifies no GPUs"
        raise ConfigError(f"{where} has kind KIND_GPU but {detail}")
    for gid in group.gpus:
        if gid not in gpus:
            raise ConfigError(
                f"{where} specifies invalid or unsupported gpu id {gid}. GPUs with at least "
                f"the minimum required CUDA compute compatibility of "
                f"{min_compute_capability:f} are: {', '.join(map(str, gpus))}"
            )


def instance_specs(config: mc.ModelConfig) -> list[InstanceSpec]:
    """One spec per instance, in Triton's order: per group, per count, per GPU."""
    specs: list[InstanceSpec] = []
    for group_index, group in enumerate(config.instance_group):
        kind = Kind.Name(group.kind)
        devices = list(group.gpus) if group.kind == KIND_GPU else [0]
        for index in range(max(int(group.count), 1)):
            name = f"{group.name}_{index}"
            specs.extend(InstanceSpec(name, kind, d, group_index, index) for d in devices)
    return specs
