# The course's commands (see README.md):
#   make lab         learners: set everything up, then open YOUR notebooks (workspace/, no solutions)
#   make test        set everything up, the contributor's set too, then run the whole test suite
#   make instructor  instructors and contributors: notebooks/ (the source, with solutions) and nbgrader's tools
#   make publish NB=03_paged_kv_cache   self-learners, once done with a notebook: later notebooks may use
#                                       the course's solution of it where yours is unfinished
#   make demo   the lecture's copy-on-write demo alone, in JupyterLab (see docs/widgets.md);
#               NOTEBOOK=path/to/04_fork_and_copy_on_write.ipynb runs a learner's class
#   make demo-html  the same story as one static page, .demo/cow_story.html, for a room without a kernel
#   make site   the course as a website, .site/html/index.html, from the learner's release (no solutions)
# `make setup` alone builds .venv with the learner's set (requirements/learner.txt); `make test`,
# `make lint` and `make contributor` add the contributor's (requirements/contributor.txt) on top.
# Every target reuses .venv once it is up to date.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PINS   := requirements/learner.txt
STAMP  := $(VENV)/.installed
CONTRIBUTOR_PINS  := requirements/contributor.txt
CONTRIBUTOR_STAMP := $(VENV)/.contributor-installed
PIP    := $(BIN)/python -m pip install --disable-pip-version-check
# Installed first and on their own, with pip's own lines (download bars included): the longest
# wait then says what it is; the rest installs quietly. Triton ships for Linux only.
BIG    := torch $(if $(filter Linux,$(shell uname -s)),triton)
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

.PHONY: setup contributor lab instructor publish test lint clean-venv demo demo-html site

setup: $(STAMP)

# Sizes measured on Linux x86_64, Python 3.11, CPU wheels (README.md, "Start here").
$(STAMP): $(PINS) pyproject.toml setup.py
	@echo "setup 1/4: a Python environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/4: $(BIG), pinned in $(PINS): about 1.9 GB once installed, the biggest part"
	$(PIP) -c $(PINS) $(BIG)
	@echo "setup 3/4: JupyterLab, nbgrader, matplotlib and the rest of $(PINS): about 110 smaller packages, 0.5 GB"
	$(PIP) --quiet -r $(PINS)
	@echo "setup 4/4: the course's helper package, paged_helpers (editable)"
	$(PIP) --quiet --no-deps -e .
	$(BIN)/python -c "import paged_helpers; print(paged_helpers.banner())"
	touch $(STAMP)

# The tests, the browser, the linters and the website's build tool, on top of the learner's set.
contributor: $(CONTRIBUTOR_STAMP)

$(CONTRIBUTOR_STAMP): $(STAMP) $(CONTRIBUTOR_PINS) requirements/site.txt
	@echo "setup, contributor's set: tests, browser, lint and website ($(CONTRIBUTOR_PINS)): about 0.45 GB more"
	$(PIP) --quiet -r $(CONTRIBUTOR_PINS)
	touch $(CONTRIBUTOR_STAMP)

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

# The website's build tool (requirements/site.txt) on top of the learner's set; website/build.py says what it does.
SITE_STAMP := $(VENV)/.site-installed

$(SITE_STAMP): $(STAMP) requirements/site.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements/site.txt
	touch $(SITE_STAMP)

site: $(SITE_STAMP)
	$(BIN)/python website/build.py --out .site/html --work .site/work

test: contributor
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: contributor
	$(BIN)/ruff check paged_helpers tests run.py autograde website tools

clean-venv:
	rm -rf $(VENV)
