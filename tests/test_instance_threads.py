"""Per-instance thread defaults of the framework backends (issue 29, item 3): with N > 1
CPU instances and no thread setting, ONNX Runtime sessions keep a thread per core with
spinning off, and PyTorch / OpenVINO instances get max(1, cores // N) intra-op threads; an explicit
setting wins; one instance keeps the framework's default."""

from __future__ import annotations

import os

import pytest
from despina import mc, threads_per_instance

onnx_options = pytest.importorskip("despina_backend_onnx.options")

CORES = len(os.sched_getaffinity(0))


def config(*counts: int, params: dict[str, str] | None = None) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m")
    for count in counts:
        result.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_CPU)
    for key, value in (params or {}).items():
        result.parameters[key].string_value = value
    return result


@pytest.mark.parametrize("counts", [(1,), (2,), (4,), (2, 3)])
def test_onnx_instances_keep_all_cores_without_spinning(counts: tuple[int, ...]) -> None:
    """Every session keeps onnxruntime's default pool size; with N > 1 instances its idle
    threads do not spin."""
    pytest.importorskip("onnxruntime")
    opts = onnx_options.session_options(config(*counts), "m")
    assert opts.intra_op_num_threads == 0
    if sum(counts) > 1:
        assert opts.get_session_config_entry(onnx_options.SPINNING) == "0"
    else:
        with pytest.raises(Exception, match="does not have configuration"):
            opts.get_session_config_entry(onnx_options.SPINNING)


def test_onnx_explicit_thread_count_wins() -> None:
    pytest.importorskip("onnxruntime")
    for value in ("0", "3"):
        params = {"intra_op_thread_count": value}
        opts = onnx_options.session_options(config(4, params=params), "m")
        assert opts.intra_op_num_threads == int(value)


def test_gpu_instances_do_not_count() -> None:
    conf = config(1)
    conf.instance_group.add(count=4, kind=mc.ModelInstanceGroup.KIND_GPU)
    assert threads_per_instance(conf) == 0


def test_instances_split_the_cores() -> None:
    """The rule the torch backend applies in each instance's thread (and ORT, OpenVINO)."""
    assert threads_per_instance(config(1)) == 0
    assert threads_per_instance(config(2)) == max(1, CORES // 2)
    assert threads_per_instance(config(8)) == max(1, CORES // 8)


def test_openvino_streams_per_instance() -> None:
    ov = pytest.importorskip("despina_backend_openvino.options")
    assert ov.per_instance_defaults({}, config(1)) == {}
    per = max(1, CORES // 4)
    assert ov.per_instance_defaults({}, config(4)) == {
        "NUM_STREAMS": "4",
        "INFERENCE_NUM_THREADS": str(per * 4),
    }
    explicit = {"INFERENCE_NUM_THREADS": "1"}
    assert ov.per_instance_defaults(explicit, config(4)) == explicit
