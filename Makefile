# Two commands on a fresh machine: `make run` and `make test`. Both create .venv if missing and
# install the project (with its test extra) into it; the install is redone when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?= configs/sim.toml

.PHONY: install kernels run test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# The numba kernels, compiled into their cache with a progress bar (seconds when the cache is warm):
# otherwise the first processes a test or a lab starts would each compile them at the same time.
kernels: $(STAMP)
	$(BIN)/walklab model compile

run: kernels
	$(BIN)/walklab run $(CONFIG)

test: kernels
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: kernels
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
