# Two commands set up everything on a fresh machine:
#   make demo   install, then run the offline end-to-end demo
#   make test   install, then run the test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.evidra-installed
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-slow test-all lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: the local CPU wheel (an unpinned torch pulls several GB of CUDA packages)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/evidra demo --out evidra-demo

test: install
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: install
	$(BIN)/python -m pytest -q -m slow

test-all: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests $(wildcard benchmarks)
	$(BIN)/ruff format --check src tests $(wildcard benchmarks)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) evidra-demo .pytest_cache .mypy_cache .ruff_cache
