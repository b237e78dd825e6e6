# Quick start: `make run` (install + fuse the bundled example), `make test` (install + all tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/autofusion fuse examples/mlp_block.onnx -o out/example --verify

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

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
