# Two commands: `make train` and `make test`. Both create .venv from requirements.txt first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=
PYTEST_ARGS ?=

.PHONY: train test bench doctor new-task clean help

help:  ## list the targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/ --/'

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	touch $@

train: $(VENV)/.installed  ## set up, then `python src/train.py $(ARGS)`
	$(PY) src/train.py $(ARGS)

test: $(VENV)/.installed  ## set up, then run the test suite (not the `slow` ones)
	$(PY) -m pytest -n auto $(PYTEST_ARGS)

bench: $(VENV)/.installed  ## the CPU benchmarks behind BENCHMARKS.md (run on an idle machine)
	PYTHONPATH=src $(PY) bench/startup.py
	PYTHONPATH=src $(PY) bench/overhead.py
	PYTHONPATH=src $(PY) bench/default_run.py

doctor: $(VENV)/.installed  ## check this machine: versions, devices, all-reduce, loopback, disk, data
	PYTHONPATH=src $(PY) -m litlab.doctor $(ARGS)

new-task: $(VENV)/.installed  ## copy a domain into a new task: make new-task NAME=mytask FROM=vision|medical3d|graph
	PYTHONPATH=src $(PY) -m litlab.scaffold "$(NAME)" "$(FROM)"

clean:  ## remove run outputs (keeps data/ and .venv)
	rm -rf logs/* .pytest_cache
