# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create the virtual environment and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The development install is pinned to this torch (a CPU build that installs quickly);
# the package itself accepts any torch >= 2.6.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-slow lint format clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[dev]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/posenc demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests

test: lint
	$(PY) -m pytest -q -n 2 -m "not slow"

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 -m slow

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix src tests
	$(VENV)/bin/ruff format src tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
