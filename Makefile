# The course's two commands (see README.md):
#   make lab    set everything up, then open the notebooks in JupyterLab
#   make test   set everything up, then run the whole test suite
# `make setup` alone builds .venv; every target reuses it once it is up to date.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PINS   := requirements/cpu-pins.txt
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup lab test lint clean-venv

setup: $(STAMP)

$(STAMP): $(PINS) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r $(PINS)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -c "import paged_helpers; print(paged_helpers.banner())"
	touch $(STAMP)

lab: setup
	cd notebooks && ../$(BIN)/jupyter lab $(LAB_ARGS)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check paged_helpers tests run.py autograde

clean-venv:
	rm -rf $(VENV)
