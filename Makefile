# Developer entry points. `make demo` and `make test` work on a fresh machine: they create the
# virtualenv and install Node 22 + the pinned pi versions into .tools/ first (no root needed).
VENV      ?= .venv
PYTHON    ?= python3
PY        := $(VENV)/bin/python
TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(TOOLS_BIN):$(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo test test-fast lint bench clean

setup: $(VENV)/.installed $(TOOLS_BIN)/pi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

$(TOOLS_BIN)/pi: scripts/install-tools.sh
	bash scripts/install-tools.sh

demo: setup
	$(VENV)/bin/ctxwrap demo

# pytest's exit 5 ("no tests collected") is a failure here, not a pass. -rs lists each skip
# with its reason (a missing zsh/fish/man/systemd says which and how to install it);
# --durations names the slowest tests, to keep the suite within its time budget.
test: setup
	$(TOOLS_BIN)/node --test tests/node/*.test.ts
	rc=0; $(PY) -m pytest -q -rs --durations=25 -p no:cacheprovider $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-fast: setup
	$(PY) -m pytest -q -m "not e2e and not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check ctxwrap tests bench scripts
	$(VENV)/bin/ruff format --check ctxwrap
	$(VENV)/bin/mypy

# Benchmarks report ratios and targets; they do not gate (a missed target is printed, not fatal).
bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || echo "== $$b: exit $$? (a target missed, or it failed)"; done

clean:
	rm -rf $(VENV) .tools build dist .pytest_cache .mypy_cache .ruff_cache
