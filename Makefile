# Two commands: `make train` and `make test`. Both create .venv from requirements.txt first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=
PYTEST_ARGS ?=
# one pytest worker more than the cores: a worker that waits on a subprocess (a server, DDP
# ranks, a sweep) leaves its core to the extra one (2 cores, 2026-12-04: 3 workers took 235,
# 256 and 270 s; 2 workers 272 and 279 s; 4 workers 294 s)
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(getattr(os, 'sched_getaffinity', lambda _: range(os.cpu_count() or 1))(0)) + 1)")
# TORCH=cpu: torch and torchvision come from PyTorch's CPU wheel index (no CUDA libraries:
# about 4 GB less in .venv); everything else, and the default (empty) route, from PyPI only.
TORCH ?=
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PINS := $(shell grep -oE '^torch(vision)?==[^ ]+' requirements.txt)
# JupyterLab refuses to start as root (containers, CI) unless told it may
JUPYTER_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# `make notebook` serves copies of the tutorials from here (git-ignored): running them never
# changes the tracked notebooks/*.ipynb (outputs, .ipynb_checkpoints/). PORT=8899: that port
# (taken: JupyterLab stops and says so); unset: 8888 or the next free one.
NOTEBOOK_COPIES := notebooks/.work
PORT ?=
JUPYTER_PORT := $(if $(PORT),--ServerApp.port=$(PORT) --ServerApp.port_retries=0)

.PHONY: train test lock coverage notebook notebook-copies bench doctor new-task schemas clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/ --/'

# The lock (requirements.lock: requirements.txt resolved by pip, every package pinned), then
# the project itself, editable and without further dependencies: `import litlab` works in any
# process of .venv (a notebook's kernel too). uv installs them (nothing left to resolve:
# --no-deps), from the sources pip is configured with (tools/uv_install.py): on 2 cores,
# alone, 61 s where `pip install -r requirements.txt` took 167 s for the same 285 packages
# (cold caches, 2026-12-05). TORCH=cpu: torch and torchvision from PyTorch's CPU index,
# then the lock without the CUDA build's torch, torchvision, triton and NVIDIA libraries. The
# lock holds the packages of the platform it was resolved on (its `# platform:` line); on
# another one (macOS, ARM) pip resolves requirements.txt there instead.
UV_PIN := uv==0.13.9
UV = $(PY) tools/uv_install.py
CUDA_ONLY := ^(torch|torchvision|triton|cuda-[a-z-]+|nvidia-[a-z0-9-]+)==
PLATFORM ?= $(shell uname -sm)
LOCK_PLATFORM := $(shell sed -n 's/^\# platform: //p' requirements.lock)
$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(UV_PIN)
ifeq ($(TORCH),cpu)
	$(UV) --index-url $(TORCH_INDEX) $(TORCH_PINS)
else ifneq ($(TORCH),)
	$(error TORCH=$(TORCH) is not known; use TORCH=cpu or leave it unset)
endif
ifneq ($(PLATFORM),$(LOCK_PLATFORM))
	$(PY) -m pip install -r requirements.txt
else ifeq ($(TORCH),cpu)
	grep -v -E '$(CUDA_ONLY)' requirements.lock > $(VENV)/cpu.lock
	$(UV) --no-deps -r $(VENV)/cpu.lock
else
	$(UV) --no-deps -r requirements.lock
endif
	$(UV) --no-deps --no-build-isolation -e .
	touch $@

# requirements.txt resolved again by pip, into requirements.lock (after changing a pin)
LOCK_VENV := /tmp/litlab-lock-venv
lock:  ## re-resolve requirements.txt with pip and write requirements.lock (every package pinned)
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -r requirements.txt
	{ echo "# The whole environment make's set-up installs: requirements.txt (the direct pins) resolved"; \
	  echo "# by pip, every package pinned. Regenerate with \`make lock\` after changing requirements.txt."; \
	  echo "# platform: $$(uname -sm)"; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf $(LOCK_VENV)

train: $(VENV)/.installed  ## set up, then `python src/train.py $(ARGS)`
	$(PY) src/train.py $(ARGS)

test: $(VENV)/.installed  ## set up, then run the test suite (not the `slow` ones)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20 $(PYTEST_ARGS)

coverage: $(VENV)/.installed  ## `make test` under coverage.py (subprocesses included): line coverage of src/litlab
	rm -f .coverage .coverage.*
	LITLAB_TEST_BUDGET_S=100000 $(PY) -m coverage run -m pytest -n $(TEST_WORKERS) --dist loadgroup -q $(PYTEST_ARGS)
	$(PY) -m coverage combine -q
	@echo "line coverage of src/litlab: $$($(PY) -m coverage report --format=total)% (per file: $(PY) -m coverage report)"

notebook: $(VENV)/.installed notebook-copies  ## set up, then JupyterLab on copies of notebooks/ (kernel: this .venv; 127.0.0.1 only): make notebook PORT=8899 ARGS=--no-browser
	$(VENV)/bin/jupyter lab --notebook-dir=$(NOTEBOOK_COPIES) --ServerApp.ip=127.0.0.1 $(JUPYTER_PORT) $(JUPYTER_ROOT) $(ARGS)

# A copy is made when it is missing and never overwritten: it holds your outputs and edits
# (delete it to get the tutorial afresh). A tutorial changed since its copy is pointed out.
notebook-copies:  ## copy the tutorials missing from notebooks/.work/ (the copies there are kept)
	@mkdir -p $(NOTEBOOK_COPIES)
	@for nb in notebooks/*.ipynb; do \
	    copy="$(NOTEBOOK_COPIES)/$${nb##*/}"; \
	    if [ ! -e "$$copy" ]; then cp "$$nb" "$$copy" && echo "new copy: $$copy"; \
	    elif [ "$$nb" -nt "$$copy" ]; then \
	        echo "note: $$nb changed after $$copy was made; yours is kept (delete it for the new one)"; \
	    fi; \
	done

bench: $(VENV)/.installed  ## the CPU benchmarks behind BENCHMARKS.md (run on an idle machine)
	PYTHONPATH=src $(PY) bench/startup.py
	PYTHONPATH=src $(PY) bench/overhead.py
	PYTHONPATH=src $(PY) bench/default_run.py
	$(PY) bench/threads.py

doctor: $(VENV)/.installed  ## check this machine: versions, devices, all-reduce, loopback, disk, data
	PYTHONPATH=src $(PY) -m litlab.doctor $(ARGS)

schemas: $(VENV)/.installed  ## rewrite schemas/ (the config groups' JSON Schemas) from the models
	PYTHONPATH=src $(PY) -m litlab.config.schemas

new-task: $(VENV)/.installed  ## copy a domain into a new task: make new-task NAME=mytask FROM=vision (any folder of src/litlab/domains)
	PYTHONPATH=src $(PY) -m litlab.scaffold "$(NAME)" "$(FROM)"

clean:  ## remove run outputs (keeps data/ and .venv)
	rm -rf logs/* .pytest_cache .coverage .coverage.*
