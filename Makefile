# The two commands of the README. Each sets up .venv on first use, so a fresh clone needs
# nothing but Python >= 3.10 (and, for the PostgreSQL tests, the server binaries).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the package alone: what the demo needs (the dev extras bring servers, linters, peers)
BASE_STAMP := $(VENV)/.installed-base

.PHONY: demo test bench lint docs

$(BASE_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP) $(BASE_STAMP)

# the demo writes ./agent-memory-demo.db, a file of its own (never $AGENT_MEMORY_URL's
# database); --reset deletes only that file, so running it again starts afresh
# The package's modules are compiled first (what is up to date is skipped), as an installed
# wheel's are: where no bytecode is written (PYTHONDONTWRITEBYTECODE), each command the demo
# suggests would compile them again, 0.07 s of its start.
demo: $(BASE_STAMP)
	$(PY) -m compileall -q langgraph_checkpoint_agent_memory
	$(VENV)/bin/agent-memory demo --reset

test: $(STAMP)
	$(PY) -m ruff check langgraph_checkpoint_agent_memory tests benchmarks examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

# the documentation site, in strict mode: a broken link, anchor or API reference fails it
# (the variable silences the theme's banner about its end of life in May 2027)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	$(PY) -m benchmarks run

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
