"""Metrics pages of several serving processes summed into one."""

from __future__ import annotations

from despina_metrics_prometheus.summed import sum_pages

PAGE = """# HELP nv_inference_count Number of inferences
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{{model="m",version="1"}} {pending}
# TYPE nv_model_load_duration_secs gauge
nv_model_load_duration_secs{{model="m",version="1"}} {load}
# TYPE nv_cpu_memory_total_bytes gauge
nv_cpu_memory_total_bytes 1000
# TYPE first_response histogram
first_response_bucket{{model="m",le="10"}} {count}
first_response_bucket{{model="m",le="+Inf"}} {count}
first_response_sum{{model="m"}} 0.5
first_response_count{{model="m"}} {count}
"""


def test_samples_of_one_name_and_labels_add_host_readings_do_not() -> None:
    pages = [PAGE.format(count=3, pending=1, load=0.25), PAGE.format(count=4, pending=2, load=2)]
    summed = sum_pages(pages)
    assert summed.splitlines() == [
        "# HELP nv_inference_count Number of inferences",
        "# TYPE nv_inference_count counter",
        'nv_inference_count{model="m",version="1"} 7',
        "# TYPE nv_inference_pending_request_count gauge",
        'nv_inference_pending_request_count{model="m",version="1"} 3',
        "# TYPE nv_model_load_duration_secs gauge",
        'nv_model_load_duration_secs{model="m",version="1"} 2',
        "# TYPE nv_cpu_memory_total_bytes gauge",
        "nv_cpu_memory_total_bytes 1000",
        "# TYPE first_response histogram",
        'first_response_bucket{model="m",le="10"} 7',
        'first_response_bucket{model="m",le="+Inf"} 7',
        'first_response_sum{model="m"} 1',
        'first_response_count{model="m"} 7',
    ]


def test_a_family_only_one_process_has_is_kept() -> None:
    extra = '# TYPE custom counter\ncustom{k="v"} 5\n'
    summed = sum_pages([PAGE.format(count=1, pending=0, load=1), extra])
    assert summed.endswith('# TYPE custom counter\ncustom{k="v"} 5\n')
