# Fresh machine: `make demo` installs and answers sample questions; `make test` installs and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# The demo needs the embedded default only; the tests exercise every extra.
DEMO_EXTRAS ?= hf
TEST_EXTRAS ?= hf,dense,serve,report,gate,llamacpp,dev
# The suite runs in two worker processes, each test file whole in one of them (its module fixtures load once).
TEST_WORKERS ?= 2
# llama-cpp-python compiles from source: portable x86 flags (the native build crashes on CPUs with AMX).
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install install-all system-deps demo test lint format bench llama-server llama-variants clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned: a looser requirement can pull a multi-GB CUDA build.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(VENV)/.installed-all: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[$(TEST_EXTRAS)]"
	touch $@ $(VENV)/.installed-demo

install: $(VENV)/.installed-demo
install-all: $(VENV)/.installed-all

# Headless Chromium renders the HTML report and the trace viewer in the tests (Debian package).
system-deps:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium)

demo: install
	$(BIN)/quco demo

test: install-all system-deps
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install-all
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: install-all
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench: install-all
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

# llama.cpp's own server (parallel decoding slots) for bench/bench_serve.py, built from the llama.cpp sources
# inside the llama-cpp-python source distribution on PyPI (a few minutes of compiling).
llama-server: $(BIN)/llama-server
$(BIN)/llama-server: | $(VENV)/.installed-all
	scripts/build-llama-server.sh $(BIN) $(BIN)/pip

# llama-cpp-python with its CPU kernels chosen at run time (every x86 level), in build/llama-variants beside the
# portable build: `python bench/bench_eval_speed.py --modes threads2,variants --llama-cpp-dir build/llama-variants`
# compares the two (docs/evaluation_model.md). About 10 minutes of compiling on 2 idle cores.
llama-variants: | $(VENV)/.installed-all
	scripts/build-llama-variants.sh build/llama-variants $(BIN)/pip

clean:
	rm -rf $(VENV) build dist src/*.egg-info
