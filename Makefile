# jupyter-gkews developer entry points.
#   make lab    set up .venv and start JupyterLab with the extension and the demo notebook
#   make test   set up .venv and run every test: the linters, pytest, jest, and the browser tests
#               (Galata/Playwright on Debian's Chromium, installed with apt when missing)
#   make lint   flake8 (settings in setup.cfg), eslint and the prettier check (.eslintrc.js, .prettierrc);
#               `.venv/bin/jlpm prettier` formats the TypeScript
#   make screenshots  run the browser tests and save docs/img/paused.png and resumed.png
#   make clean  remove everything the two above created
#
# Idempotent: each step leaves a stamp in .venv/ and runs again only when its
# inputs change.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
# Always this torch: an unpinned one pulls a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

LABEXT_OUT := jupyter_gkews/labextension
LAB_SOURCES := package.json tsconfig.json $(wildcard yarn.lock) \
	$(shell find labextension style -type f 2>/dev/null)

# Recipes use the venv's jupyter, jlpm and node tooling.
export PATH := $(BIN):$(PATH)
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# jupyter refuses to run as root unless told to.
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --ServerApp.allow_root=True)
LAB_ARGS ?=

.PHONY: venv install lint test test-python test-js test-ui screenshots lab clean FORCE
.DEFAULT_GOAL := test

venv: $(VENV)/bin/python

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip

# torch (pinned) and the build tools, so that the editable install below can
# run without build isolation against the venv's own jupyterlab.
$(VENV)/.build-deps: $(VENV)/bin/python pyproject.toml Makefile
	$(BIN)/pip install "$(TORCH_PIN)"
	$(BIN)/pip install "hatchling>=1.5.0" editables "hatch-nodejs-version>=0.3.2" \
		"hatch-jupyter-builder>=0.5" "jupyterlab>=4.2,<5"
	touch $@

$(VENV)/.node-modules: $(VENV)/.build-deps package.json .yarnrc.yml $(wildcard yarn.lock)
	$(BIN)/jlpm install
	touch $@

# Rebuild the labextension when a source changes or when the output is missing.
$(VENV)/.labextension: $(VENV)/.node-modules $(LAB_SOURCES) \
		$(if $(wildcard $(LABEXT_OUT)/static/style.js),,FORCE)
	$(BIN)/jlpm build
	touch $@

$(VENV)/.installed: $(VENV)/.build-deps $(VENV)/.labextension pyproject.toml \
		$(wildcard jupyter-config/*/*.json) install.json
	$(BIN)/pip install --no-build-isolation -e ".[test,dev,torch]" "$(TORCH_PIN)"
	$(BIN)/jupyter server extension list 2>&1 | grep -i gkews
	$(BIN)/jupyter labextension list 2>&1 | grep -i gkews
	touch $@

install: $(VENV)/.installed

# The browser tests drive Debian's Chromium: Playwright's own browser download is not used.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
UI_DEPS := ui-tests/node_modules/.gkews-installed

$(CHROMIUM):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || \
		{ $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

$(UI_DEPS): $(VENV)/.build-deps ui-tests/package.json $(wildcard ui-tests/yarn.lock)
	cd ui-tests && $(BIN)/jlpm install
	touch $@

# Each linter runs even when another fails (one run shows every problem).
LINT = $(BIN)/python -m flake8 || status=1; \
	$(BIN)/jlpm eslint || status=1; \
	$(BIN)/jlpm prettier:check || status=1;

lint: install
	@status=0; $(LINT) exit $$status

# The linters and all three suites run even when one fails, so that one run shows every failure.
test: install $(UI_DEPS) $(CHROMIUM)
	@status=0; \
	$(LINT) \
	$(BIN)/python -m pytest -q tests || status=1; \
	$(BIN)/jlpm test || status=1; \
	(cd ui-tests && $(BIN)/jlpm test) || status=1; \
	exit $$status

test-python: install
	$(BIN)/python -m pytest -q tests

test-js: install
	$(BIN)/jlpm test

test-ui: install $(UI_DEPS) $(CHROMIUM)
	cd ui-tests && $(BIN)/jlpm test

screenshots: install $(UI_DEPS) $(CHROMIUM)
	cd ui-tests && GKEWS_SCREENSHOTS=1 $(BIN)/jlpm test

lab: install
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)/demo" \
		--ServerApp.default_url=/lab/tree/gkews-demo.ipynb \
		$(ALLOW_ROOT) $(LAB_ARGS)

clean:
	rm -rf $(VENV) node_modules lib tsconfig.tsbuildinfo $(LABEXT_OUT) \
		jupyter_gkews/_version.py .pytest_cache dist build *.egg-info \
		.yarn/cache .yarn/install-state.gz \
		ui-tests/node_modules ui-tests/test-results ui-tests/playwright-report

FORCE:
