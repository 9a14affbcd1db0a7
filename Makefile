# make serve · make test · make lint · make bench · make bench-check · make fuzz · make image-test — each sets up .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := $(sort $(wildcard plugins/*/pyproject.toml))
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(PLUGINS))
STAMP := $(VENV)/.installed

.PHONY: serve test lint bench bench-check compare fuzz triton-qa image-test venv clean

venv: $(STAMP)

$(STAMP): constraints.txt core/pyproject.toml $(PLUGINS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e 'core[testing,gpu,tracing]' $(addprefix -e ,$(PLUGIN_DIRS)) \
		pytest pytest-timeout ruff mypy onnx 'moto[server]' boto3 gcsfs adlfs gcp-storage-emulator h2 trustme \
		hypothesis schemathesis openai transformers tokenizers xgrammar opentelemetry-proto kubernetes-validate promql-parser prometheus-client
	@if command -v npm >/dev/null; then npm install -s --no-audit --no-fund --prefix $(VENV)/node azurite@3.37.0; \
	else echo 'npm not found: the as:// repository tests (Azurite) will be skipped'; fi
	@if command -v redis-server >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && { apt-get install -y -q redis-server || \
		{ apt-get update -q && apt-get install -y -q redis-server; }; } >/dev/null; then :; \
	else echo 'redis-server not installed (apt-get install redis-server): the redis cache tests will be skipped'; fi
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/despina serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Despina and tritonserver side by side, the same requests, the same answers (not part of
# `make test`: it needs Triton, by default ../shared/tools/tritonserver, or $TRITONSERVER).
compare: $(STAMP)
	$(BIN)/python -m pytest compare $(PYTEST_ARGS)

# Triton's own Python-backend QA (qa/L0_backend_python, CPU cases) against Despina, from a
# local copy of github.com/triton-inference-server/server (fetches nothing; not in `make test`).
# PYTHON_BACKEND_REPO (a python_backend copy) adds the cases that serve its examples.
triton-qa: $(STAMP)
	$(BIN)/python tests/triton_qa/run.py --triton-repo "$(TRITON_SERVER_REPO)" $(TRITON_QA_ARGS)

# The property tests of tests/fuzz/ (bounded in `make test`) as long campaigns: every target
# runs FUZZ_EXAMPLES cases (default 100000) and prints cases / crashes / hangs / 5xx.
FUZZ_EXAMPLES ?= 100000
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz/campaign.py --examples $(FUZZ_EXAMPLES) $(FUZZ_ARGS)

# The container image (deploy/container) built with build.sh from BASE_IMAGE (default
# localhost/debian-python:bookworm, made with mmdebstrap if missing) and run with podman:
# uid 1000, HEALTHCHECK, HTTP/gRPC/metrics, SIGTERM drain, --shm-size. Skips without podman.
image-test: $(STAMP)
	DESPINA_IMAGE_TEST=1 $(BIN)/python -m pytest tests/container -rs $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check core plugins tests bench compare
	$(BIN)/ruff format --check core plugins tests bench compare
	$(BIN)/mypy core/src $(addsuffix /src,$(PLUGIN_DIRS))

bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python bench/run.py --protocol grpc $(BENCH_ARGS)
	$(BIN)/python bench/backends.py

# CPU per request of the Python-backend add_sub (HTTP JSON, binary, gRPC; c=1 and 8) and idle
# RSS, this tree against BASELINE (default a35dc3f), into bench/results/bench_check.md (~3 min;
# needs wrk, h2load and ../shared/tools/peers). Informs; fails nothing. BENCH_CHECK_ARGS=--instructions
# counts instructions per request under callgrind instead (repeatable under any load, ~1.5 min).
BASELINE ?= a35dc3f
bench-check: $(STAMP)
	$(BIN)/python bench/check.py --baseline $(BASELINE) $(BENCH_CHECK_ARGS)

clean:
	rm -rf $(VENV)
