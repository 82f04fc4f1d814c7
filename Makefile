# The course's commands (see README.md):
#   make lab         learners: set everything up, then open YOUR notebooks (workspace/, no solutions)
#   make test        set everything up, then run the whole test suite
#   make instructor  instructors and contributors: notebooks/ (the source, with solutions) and nbgrader's tools
#   make publish NB=03_paged_kv_cache   self-learners, once done with a notebook: later notebooks may use
#                                       the course's solution of it where yours is unfinished
#   make demo   the lecture's copy-on-write demo alone, in JupyterLab (see docs/widgets.md);
#               NOTEBOOK=path/to/04_fork_and_copy_on_write.ipynb runs a learner's class
#   make demo-html  the same story as one static page, .demo/cow_story.html, for a room without a kernel
# `make setup` alone builds .venv; every target reuses it once it is up to date.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PINS   := requirements/cpu-pins.txt
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
# JupyterLab refuses to run as root unless told; root is what a learner is in a container or on a
# hosted notebook service, so the lab targets tell it, and say so once.
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
ROOT_NOTE := @$(if $(AS_ROOT),echo "running as root (a container or a hosted notebook service?): JupyterLab starts with --allow-root",true)
PYTEST_ARGS ?=
WORKSPACE ?= workspace
WORKSPACE_BUILD ?= .workspace-build
# nbgrader's instructor tools switched off for learners (see config/learner-lab/README.md)
LEARNER_LAB := $(CURDIR)/config/learner-lab

DEMO_DIR := .demo
NOTEBOOK ?=

.PHONY: setup lab instructor publish test lint clean-venv demo demo-html

setup: $(STAMP)

$(STAMP): $(PINS) pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r $(PINS)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -c "import paged_helpers; print(paged_helpers.banner())"
	touch $(STAMP)

lab: setup
	$(BIN)/python autograde/course.py workspace --into $(WORKSPACE) --build $(WORKSPACE_BUILD)
	$(ROOT_NOTE)
	cd $(WORKSPACE) && JUPYTER_CONFIG_PATH="$(LEARNER_LAB)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(abspath $(BIN))/jupyter lab $(AS_ROOT) $(LAB_ARGS)

instructor: setup
	$(ROOT_NOTE)
	cd notebooks && ../$(BIN)/jupyter lab $(AS_ROOT) $(LAB_ARGS)

publish: setup
	@test -n "$(NB)" || { echo "usage: make publish NB=03_paged_kv_cache"; exit 2; }
	$(BIN)/python autograde/course.py publish $(NB) --into published

# A fresh copy each time (Lab saves outputs into the notebook it opens); the folder holds
# nothing but the demo, so nothing else shows in Lab's file browser; demo/jupyter hides
# nbgrader's menus and panels.
demo: setup
	$(ROOT_NOTE)
	mkdir -p $(DEMO_DIR)
	cp demo/copy_on_write.ipynb $(DEMO_DIR)/
	cd $(DEMO_DIR) && PH_DEMO_NOTEBOOK="$(if $(NOTEBOOK),$(abspath $(NOTEBOOK)))" \
		JUPYTER_CONFIG_PATH="$(CURDIR)/demo/jupyter" ../$(BIN)/jupyter lab copy_on_write.ipynb $(AS_ROOT) $(LAB_ARGS)

demo-html: setup
	mkdir -p $(DEMO_DIR)
	$(BIN)/python -m paged_helpers.widgets.lecture --html $(DEMO_DIR)/cow_story.html \
		$(if $(NOTEBOOK),--notebook "$(abspath $(NOTEBOOK))")

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check paged_helpers tests run.py autograde

clean-venv:
	rm -rf $(VENV)
