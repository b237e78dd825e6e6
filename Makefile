# Quick start: `make run` (install + fuse the bundled example), `make test` (install, lint,
# layering, all tests; ../shared beside the checkout), `make test-unit` (no ../shared).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-unit lint format bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,bench,browser,view]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/autofusion fuse examples/mlp_block.onnx -o out/example --verify

# Lint and layering first, pytest last (its summary closes the output). Every test runs:
# unit, e2e and slow (markers: pyproject.toml); -n auto spreads them over the cores, and
# --dist loadfile keeps each file's tests on one worker, beside its module-scoped fixtures
# and caches (computed once, not once per worker), the longest files first
# (tests/conftest.py LONGEST_FIRST; xdist would otherwise order files by test count).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: each worker and each CLI
# subprocess the tests start would otherwise compile ruleengine (and pytest rewrite the
# test modules) again.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n auto --dist loadfile --no-loadscope-reorder

test: lint
	$(PYTEST)

# Tests that need only the checkout (no ../shared).
test-unit: $(STAMP)
	$(PYTEST) -m unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache --no-logo

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Speed and coverage are measured here, never in timed unit tests. QUICK=1 for a short run.
bench: $(STAMP)
	$(BIN)/python bench/pipeline.py $(if $(QUICK),--quick)
	$(BIN)/python bench/run.py $(if $(QUICK),--quick)
	$(BIN)/python bench/solve.py $(if $(QUICK),--quick)
	$(BIN)/python bench/coverage.py
	$(BIN)/python bench/shapes.py
	$(BIN)/python bench/scale.py $(if $(QUICK),--quick)

clean:
	rm -rf $(VENV) out build dist *.egg-info .pytest_cache .ruff_cache
