# The two commands of the README. Each sets up .venv on first use, so a fresh clone needs
# nothing but Python >= 3.10 (and, for the PostgreSQL tests, the server binaries).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/agent-memory demo --reset

test: $(STAMP)
	$(PY) -m ruff check langgraph_checkpoint_agent_memory tests benchmarks examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m benchmarks run

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
