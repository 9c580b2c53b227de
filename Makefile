# Two commands on a fresh machine: `make demo` and `make test`.
# .venv's interpreter: PYTHON if given, else the fastest CPython 3.11+ this machine has, where it
# is at least 5 % faster than python3 (bench/interpreter.py, ADR 0068: an optimised build runs
# the suite's Python 10-20 % faster than pyenv's default one)
PYTHON ?=
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench clean

# uv installs what pip would in a fraction of the time (a fresh clone's set-up, BENCHMARKS.md:
# 80 s with pip); pip where uv cannot be had. uv reads no pip configuration, so this machine's
# local wheels (pip's find-links) are passed on.
$(STAMP): pyproject.toml
	py="$(PYTHON)"; [ -n "$$py" ] || py=$$(python3 bench/interpreter.py --pick) || py=python3; \
	  echo "make: .venv from $$py"; \
	  $$py -m venv $(VENV) || { rm -rf $(VENV); python3 -m venv $(VENV); }
	links=$$($(BIN)/pip config get global.find-links 2>/dev/null || echo "$${PIP_FIND_LINKS:-}"); \
	uv="$(BIN)/uv pip install -q --python $(BIN)/python $${links:+--find-links $$links}"; \
	if $(BIN)/pip install -q uv && $$uv -e '.[all,dev]'; then \
	  torch=$$(ls $${links:-/nonexistent}/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1); \
	  { [ -n "$$torch" ] && $$uv "$$torch" && $$uv 'lightning>=2.4,<3'; } || $(TORCH_SKIPPED); \
	else \
	  $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q -e '.[all,dev]' && \
	  { $(BIN)/pip install -q torch==2.13.0 'lightning>=2.4,<3' || $(TORCH_SKIPPED); }; \
	fi
	touch $(STAMP)
# PyTorch (CPU: uv takes it from this machine's own wheel, never an index's CUDA build) for the DDP
# end-to-end tests and Lightning for srun's, when this machine can install them; else skipped.
# Torch first, so that Lightning never pulls another.
TORCH_SKIPPED := echo "torch/lightning not installed: the DDP and Lightning tests will be skipped"

demo: $(STAMP)
	$(BIN)/gpufleet demo

lint: $(STAMP)
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports  # the layers and pure packages of .importlinter

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite waits on real processes far more than it computes: more workers than cores. Tests
# that share a cluster (or another costly fixture) stay on one worker (tests/support/grouping.py).
# Then the tests marked `alone` (they measure latency under a load of their own), one by one.
# 8: since test clusters fork from a zygote (ADR 0055) the pass keeps ~1.75 of 2 cores busy with
# 6 workers, most of them waiting on processes
WORKERS ?= 8
PYTEST_ARGS ?= --durations=15  # the slowest tests of each pass, for BENCHMARKS.md
# The type check runs beside the parallel pass (the suite leaves the CPUs mostly idle); its
# report is printed after it, and a type error fails `make test` as a failed test does.
# The suite's processes write their .pyc files (a clone's ignored __pycache__/) even where the
# shell sets PYTHONDONTWRITEBYTECODE=1: without them every pytest process rewrote and compiled
# the whole suite again (collecting it costs 14 s of CPU so, 5.5 s once they exist; the `alone`
# pass, serial, collects it all again), and every controller, agent and CLI compiled src.
# On a fresh clone the parallel pass's workers start at once, so each found no cached file and
# rewrote and compiled everything again (the tests, src and the packages they import: uv writes
# no .pyc): one collection first writes them all. Measured (BENCHMARKS.md, issue 27's CPU): six
# workers' collection 80.6 CPU-s cold → 19.0 s for the one collection + 32.5 s for the six.
# A test of real processes that fails under the parallel pass's load (8 workers on 2 cores) runs
# once more, alone, as CPython's regrtest does with -w (tests/support/rerun.py names each by its
# id: a grouped test's too): at most RERUN_AT_MOST of them, each named
# in the output as load-sensitive; a second failure, or more failures than that, fails the suite.
RERUN_AT_MOST ?= 5
# The `alone` pass collects only the files that mark a test so (collecting the whole suite again
# costs ~10 s, serially, to select one file's tests)
ALONE_FILES = $(shell grep -rl --include='test_*.py' 'mark\.alone' tests)
test: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP) lint
	types=$$(mktemp); $(BIN)/mypy >$$types 2>&1 & mypy=$$!; \
	  $(BIN)/pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1 || true; \
	  $(BIN)/pytest -n $(WORKERS) --dist loadgroup -m "not alone" $(PYTEST_ARGS); \
	  parallel=$$?; \
	  if [ $$parallel -eq 1 ]; then \
	    $(BIN)/python tests/support/rerun.py $(RERUN_AT_MOST) $(BIN)/pytest -m "not alone"; \
	    parallel=$$?; \
	  fi; \
	  wait $$mypy; typed=$$?; echo "--- mypy"; cat $$types; rm -f $$types; \
	  $(BIN)/pytest -m alone $(PYTEST_ARGS) $(ALONE_FILES); alone=$$?; \
	  if [ $$typed -ne 0 ]; then exit $$typed; fi; \
	  if [ $$parallel -ne 0 ]; then exit $$parallel; fi; exit $$alone

# The edit loop: the unit tests that start no process (a test that tries is skipped, naming
# what it started; `make test` runs it). No workers: it is quicker than starting them.
test-fast: $(STAMP)
	$(BIN)/pytest tests/unit --no-processes -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/gpufleet bench placement --nodes 5000 --jobs 10000 --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
