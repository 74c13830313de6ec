# The two commands of the README. Each does all set-up on a fresh machine that has python3 (>= 3.10),
# make and the package registry: it creates .venv when missing and (re)installs the project when
# pyproject.toml or setup.py changed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kfp-spot-installed

.PHONY: demo test lint format compile image clean

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kfp-spot run

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

compile: $(STAMP)
	$(BIN)/kfp-spot compile

image:
	docker build -t $$($(BIN)/python -c 'import kfp_spot; print(kfp_spot.RUNTIME_IMAGE)') .

clean:
	rm -rf $(VENV) build *.egg-info local_outputs
