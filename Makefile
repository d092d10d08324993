# Developer entry points. `make demo` and `make test` work on a fresh machine: they create the
# virtualenv and install Node 22 and the agents into .tools/ first (no root needed).
# Downloads: the virtualenv from PyPI (~200 MB installed); `make demo` then Node 22 and pi 1.x
# from npm (~350 MB), `make setup`/`make test` all agents (+ pi 0.73, Claude Code, Codex:
# ~1.2 GB). npm uses your own npm configuration (CA file, proxy, registry mirror).
# TOOLS_DIR=/elsewhere puts the agents there instead of ./.tools.
VENV      ?= .venv
PYTHON    ?= python3
PY        := $(VENV)/bin/python
TOOLS_DIR ?= $(CURDIR)/.tools
export TOOLS_DIR
export CTXWRAP_TOOLS_BIN := $(TOOLS_DIR)/bin
TOOLS_BIN := $(TOOLS_DIR)/bin
export PATH := $(TOOLS_BIN):$(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo-setup demo test test-fast lint bench clean

# Everything the tests run (CI's `make test`): Node 22, pi 1.x and 0.73, Claude Code, Codex.
setup: $(VENV)/.installed $(TOOLS_DIR)/.installed-all

# Only what the demo runs: Node 22 and pi 1.x.
demo-setup: $(VENV)/.installed $(TOOLS_BIN)/pi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

$(TOOLS_BIN)/pi: scripts/install-tools.sh
	bash scripts/install-tools.sh node22 pi1

$(TOOLS_DIR)/.installed-all: scripts/install-tools.sh
	bash scripts/install-tools.sh
	touch $@

demo: demo-setup
	$(VENV)/bin/ctxwrap demo

# pytest's exit 5 ("no tests collected") is a failure here, not a pass. -rs lists each skip
# with its reason (a missing zsh/fish/man/systemd says which and how to install it);
# --durations names the slowest tests, to keep the suite within its time budget.
# Two passes (tests/conftest.py): the tests not marked `serial` on TEST_WORKERS pytest-xdist
# workers (most wait on pi/Claude Code/the daemon, not the CPU), then the timing-sensitive
# `serial` ones alone on an idle machine. Exit 5 of one pass is fine (PYTEST_ARGS may name
# only serial tests, or none); of both, a failure. --dist loadgroup: each test is its own unit of
# work, except a module whose fixture is costly to build (ONE_WORKER_MODULES, tests/conftest.py). compileall: every test starts
# `python -m ctxwrap` processes, which would recompile the package each time where
# PYTHONDONTWRITEBYTECODE is set.
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -rs --durations=25 -p no:cacheprovider
test: setup
	$(TOOLS_BIN)/node --test tests/node/*.test.ts
	$(PY) -m compileall -q ctxwrap >/dev/null
	rp=0; $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --ctxwrap-pass=parallel $(PYTEST_ARGS) || rp=$$?; \
	rs=0; $(PYTEST) --ctxwrap-pass=serial $(PYTEST_ARGS) || rs=$$?; \
	if [ $$rp -eq 5 ] && [ $$rs -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	if [ $$rp -ne 0 ] && [ $$rp -ne 5 ]; then exit $$rp; fi; \
	if [ $$rs -ne 5 ]; then exit $$rs; fi

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
