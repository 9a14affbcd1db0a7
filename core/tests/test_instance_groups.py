"""Instance groups completed and checked as Triton does, against simulated inventories:
two GPUs, none, a backend that cannot use them; and Triton's instance names."""

from __future__ import annotations

import pytest
from despina.errors import ConfigError
from despina.repository import config as cfg, instance_groups as ig
from despina.repository.config_pipeline import normalize

CPU_ONLY = "the installed torch 2.13.0+cpu is a CPU-only build"


def completed(
    text: str, backend: str = "python", gpus: tuple[int, ...] = (0, 1), support: str | None = None
) -> cfg.mc.ModelConfig:
    config = cfg.parse_text(f'name: "m" backend: "{backend}" {text}')
    normalize(config)
    groups = ig.complete(config, gpus, support)
    del config.instance_group[:]
    config.instance_group.extend(groups)
    ig.check(config, gpus, support, 7.5)
    return config


def groups(config: cfg.mc.ModelConfig) -> list[tuple[str, str, int, list[int]]]:
    kind = cfg.mc.ModelInstanceGroup.Kind.Name
    return [(g.name, kind(g.kind), g.count, list(g.gpus)) for g in config.instance_group]


def test_default_group_goes_to_every_gpu_when_the_backend_can_use_them() -> None:
    assert groups(completed("")) == [("m", "KIND_GPU", 1, [0, 1])]


def test_default_group_stays_on_the_cpu_otherwise() -> None:
    assert groups(completed("", gpus=())) == [("m", "KIND_CPU", 1, [])]
    assert groups(completed("", "pytorch", support=CPU_ONLY)) == [("m", "KIND_CPU", 1, [])]


def test_default_count_is_one_instance_per_device() -> None:
    """Triton gives onnxruntime CPU groups two instances; Despina one (README)."""
    assert groups(completed("", "onnxruntime", gpus=())) == [("m", "KIND_CPU", 1, [])]


@pytest.mark.parametrize(
    ("text", "gpus", "support", "expected"),
    [
        ("{ kind: KIND_AUTO count: 2 }", (0, 1), None, ("m_0", "KIND_GPU", 2, [0, 1])),
        ("{ kind: KIND_AUTO gpus: [ 1 ] }", (0, 1), None, ("m_0", "KIND_GPU", 1, [1])),
        ("{ kind: KIND_AUTO }", (), None, ("m_0", "KIND_CPU", 1, [])),
        ("{ kind: KIND_AUTO gpus: [ 1 ] }", (0, 1), CPU_ONLY, ("m_0", "KIND_CPU", 1, [])),
        ('{ name: "g" kind: KIND_GPU }', (0, 1), None, ("g", "KIND_GPU", 1, [0, 1])),
    ],
)
def test_kinds_resolve(
    text: str, gpus: tuple[int, ...], support: str | None, expected: tuple[object, ...]
) -> None:
    config = completed(f"instance_group [ {text} ]", gpus=gpus, support=support)
    assert groups(config) == [expected]


@pytest.mark.parametrize(
    ("text", "gpus", "support", "message"),
    [
        (
            "{ kind: KIND_GPU gpus: [ 0, 3 ] }",
            (0, 1),
            None,
            "instance group m_0 of model m specifies invalid or unsupported gpu id 3. GPUs with "
            "at least the minimum required CUDA compute compatibility of 7.500000 are: 0, 1",
        ),
        (
            "{ kind: KIND_GPU }",
            (),
            None,
            "instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
        ),
        (
            "{ kind: KIND_GPU gpus: [ 0 ] }",
            (0,),
            CPU_ONLY,
            f"instance group m_0 of model m has kind KIND_GPU but {CPU_ONLY}",
        ),
        (
            "{ kind: KIND_CPU gpus: [ 0 ] }",
            (0,),
            None,
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        ),
        (
            "{ kind: KIND_MODEL gpus: [ 0 ] }",
            (0,),
            None,
            "instance group m_0 of model m has kind KIND_MODEL but specifies one or more GPUs",
        ),
        (  # Triton: a listed GPU that is not there makes KIND_AUTO a CPU group, then refused
            "{ kind: KIND_AUTO gpus: [ 5 ] }",
            (0, 1),
            None,
            "has kind KIND_CPU but specifies one or more GPUs",
        ),
    ],
)
def test_groups_that_cannot_be_placed_are_refused_with_tritons_text(
    text: str, gpus: tuple[int, ...], support: str | None, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        completed(f"instance_group [ {text} ]", gpus=gpus, support=support)
    assert message in str(raised.value)


def test_instance_names_are_tritons() -> None:
    """``<group>_<n>``, the same name on each GPU of the group, per count then per GPU."""
    config = completed(
        'instance_group [ { name: "g" kind: KIND_GPU count: 2 }, { kind: KIND_CPU } ]'
    )
    specs = [(s.name, s.kind, s.device_id) for s in ig.instance_specs(config)]
    assert specs == [
        ("g_0", "KIND_GPU", 0),
        ("g_0", "KIND_GPU", 1),
        ("g_1", "KIND_GPU", 0),
        ("g_1", "KIND_GPU", 1),
        ("m_1_0", "KIND_CPU", 0),
    ]
