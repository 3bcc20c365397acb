# Every step a user needs lives here. Targets create and use ./.venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dlkit-installed
OUT    := out

.PHONY: help venv demo test bench golden clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# torch first, pinned: the CPU build that lies on disk installs in seconds, while the extra's
# open range, resolved with no torch installed, would fetch a CUDA build of several GB.
TORCH_PIN ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '$(TORCH_PIN)'
	$(BIN)/python -m pip install --quiet -e '.[test,torch,jax]'
	touch $@

venv: $(STAMP)  ## create .venv: dlkit with the test, torch and jax extras

demo: $(STAMP)  ## run the main job on the bundled example
	@bash scripts/demo.sh $(OUT)/demo

# `make train TRAIN_VARIANT=majority` picks another planted signal (churn grand majority mix).
TRAIN_VARIANT ?= churn
TRAIN_STEPS   ?= 300
PLANTED       := $(OUT)/planted/$(TRAIN_VARIANT)
.PHONY: train
train: $(STAMP)  ## train the torch example on a planted-signal database; prints its JSON
	@test -f $(PLANTED)/source/planted.json || \
	  $(BIN)/python fixtures/make_planted_db.py $(PLANTED)/source --variant $(TRAIN_VARIANT)
	@test -f $(PLANTED)/db/manifest.json || \
	  $(BIN)/dlkit preprocess $(PLANTED)/source $(PLANTED)/db >&2
	$(BIN)/python examples/train_torch.py --db $(PLANTED)/db --steps $(TRAIN_STEPS) --task \
	  $$($(BIN)/python -c "import json; print(json.load(open('$(PLANTED)/source/planted.json'))['task'])")

test: $(STAMP)  ## run the whole test suite
	$(BIN)/python -m pytest -q

bench: $(STAMP)  ## run every benchmark (prints ratios against baselines)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

golden: $(STAMP)  ## regenerate golden files (review the diff before committing!)
	$(BIN)/python fixtures/make_golden.py

clean:  ## remove generated outputs and compiled kernels (keeps .venv)
	rm -rf $(OUT) .pytest_cache .hypothesis
	find src -name '*.nbi' -o -name '*.nbc' | xargs rm -f
