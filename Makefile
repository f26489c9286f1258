# Two commands set up a fresh machine: `make demo` (index and search) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME := $(CURDIR)/.demo-home

.PHONY: install demo test clean

install: $(VENV)/.installed

# The package installs `hermes-kb` only (`hermes` is Hermes Agent's); the standalone host
# gets its `hermes` command as a link inside this venv alone.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	ln -sf hermes-kb $(BIN)/hermes
	touch $@

demo: install
	HERMES_HOME=$(DEMO_HOME) $(BIN)/hermes kb index $(CURDIR)/docs
	HERMES_HOME=$(DEMO_HOME) $(BIN)/hermes kb index $(CURDIR)/hermes_kb
	HERMES_HOME=$(DEMO_HOME) $(BIN)/hermes kb search "how does hybrid search combine vector and keyword scores" -k 3
	HERMES_HOME=$(DEMO_HOME) $(BIN)/hermes kb search "writer_lock" -k 3
	HERMES_HOME=$(DEMO_HOME) $(BIN)/hermes kb status

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(DEMO_HOME)
