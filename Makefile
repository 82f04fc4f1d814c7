# The course's commands (see README.md):
#   make lab         learners: set everything up, then open YOUR notebooks (workspace/, no solutions)
#   make test        set everything up, then run the whole test suite
#   make instructor  instructors and contributors: notebooks/ (the source, with solutions) and nbgrader's tools
#   make publish NB=03_paged_kv_cache   self-learners, once done with a notebook: later notebooks may use
#                                       the course's solution of it where yours is unfinished
# `make setup` alone builds .venv; every target reuses it once it is up to date.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PINS   := requirements/cpu-pins.txt
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
PYTEST_ARGS ?=
WORKSPACE ?= workspace
WORKSPACE_BUILD ?= .workspace-build
# nbgrader's instructor tools switched off for learners (see config/learner-lab/README.md)
LEARNER_LAB := $(CURDIR)/config/learner-lab

.PHONY: setup lab instructor publish test lint clean-venv

setup: $(STAMP)

$(STAMP): $(PINS) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r $(PINS)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -c "import paged_helpers; print(paged_helpers.banner())"
	touch $(STAMP)

lab: setup
	$(BIN)/python autograde/course.py workspace --into $(WORKSPACE) --build $(WORKSPACE_BUILD)
	cd $(WORKSPACE) && JUPYTER_CONFIG_PATH="$(LEARNER_LAB)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(abspath $(BIN))/jupyter lab $(LAB_ARGS)

instructor: setup
	cd notebooks && ../$(BIN)/jupyter lab $(LAB_ARGS)

publish: setup
	@test -n "$(NB)" || { echo "usage: make publish NB=03_paged_kv_cache"; exit 2; }
	$(BIN)/python autograde/course.py publish $(NB) --into published

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check paged_helpers tests run.py autograde

clean-venv:
	rm -rf $(VENV)
