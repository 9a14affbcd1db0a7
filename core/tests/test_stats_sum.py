"""Statistics of several serving processes summed into one answer."""

from __future__ import annotations

from despina.inference.stats import ModelStats
from despina.inference.stats_sum import sum_model_stats


def _stats(requests: int, batch_size: int, last_ms: int) -> ModelStats:
    stats = ModelStats("m", "1")
    for _ in range(requests):
        stats.record_execution(batch_size, 1, 10, 2)
        stats.record_success(100, 5, batch_size, (1, 10, 2))
    stats.last_inference_ms = last_ms
    return stats


def test_counts_and_durations_add_and_last_inference_is_the_latest() -> None:
    one, two = _stats(3, 1, 1000), _stats(2, 1, 2000)
    two.record_failure(7, "BACKEND")
    two.last_inference_ms = 1500
    (summed,) = sum_model_stats([[one.snapshot()], [two.snapshot()]])
    assert summed["name"] == "m" and summed["version"] == "1"
    assert summed["inference_count"] == 5
    assert summed["execution_count"] == 5
    assert summed["last_inference"] == 1500
    assert summed["inference_stats"]["success"] == {"count": 5, "ns": 500}
    assert summed["inference_stats"]["fail"] == {"count": 1, "ns": 7}
    assert summed["inference_stats"]["compute_infer"] == {"count": 5, "ns": 50}
    (batch,) = summed["batch_stats"]
    assert batch["batch_size"] == 1
    assert batch["compute_output"] == {"count": 5, "ns": 10}


def test_batch_statistics_add_per_batch_size() -> None:
    one, two = _stats(1, 4, 1), _stats(2, 1, 1)
    two.record_execution(4, 1, 1, 1)
    (summed,) = sum_model_stats([[one.snapshot()], [two.snapshot()]])
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in summed["batch_stats"]}
    assert sizes == {1: 2, 4: 2}
    assert [b["batch_size"] for b in summed["batch_stats"]] == [1, 4]


def test_a_version_one_process_reports_is_kept_and_inputs_are_not_changed() -> None:
    only = ModelStats("other", "2").snapshot()
    first = _stats(1, 1, 1).snapshot()
    answers = [[first], [_stats(1, 1, 1).snapshot(), only]]
    summed = sum_model_stats(answers)
    assert [(s["name"], s["version"]) for s in summed] == [("m", "1"), ("other", "2")]
    assert first["inference_count"] == 1
