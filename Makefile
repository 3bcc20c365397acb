# Every step a user needs lives here. Targets create and use ./.venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dlkit-installed
OUT    := out

.PHONY: help venv demo test bench golden clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)  ## create .venv and install dlkit with test extras

demo: $(STAMP)  ## run the main job on the bundled example
	@bash scripts/demo.sh $(OUT)/demo

test: $(STAMP)  ## run the whole test suite
	$(BIN)/python -m pytest -q

bench: $(STAMP)  ## run every benchmark (prints ratios against baselines)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

golden: $(STAMP)  ## regenerate golden files (review the diff before committing!)
	$(BIN)/python fixtures/make_golden.py

clean:  ## remove generated outputs and compiled kernels (keeps .venv)
	rm -rf $(OUT) .pytest_cache .hypothesis
	find src -name '*.nbi' -o -name '*.nbc' | xargs rm -f
