# Every step a user needs lives here. Targets create and use ./.venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dlkit-installed
OUT    := out

.PHONY: help venv demo test test-nojit lint bench golden clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# torch first, pinned: the CPU build that lies on disk installs in seconds, while the extra's
# open range, resolved with no torch installed, would fetch a CUDA build of several GB.
TORCH_PIN ?= torch==2.13.0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '$(TORCH_PIN)'
	$(BIN)/python -m pip install --quiet -e '.[test,torch,jax,lint,bench]'
	touch $@

venv: $(STAMP)  ## create .venv: dlkit with the test, torch, jax, lint and bench extras

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

# The kernels as plain Python (NUMBA_DISABLE_JIT=1): their semantics without the compiler, in
# a form coverage tools can measure. Left out: tests/core/test_jit.py (it tests the compiled
# cache itself), the NextBatch golden tests (minutes each as plain Python; they check the same
# kernels as test_properties against longer goldens) and the other sampler tests (the BFS and
# collate kernels run within seconds here through test_batch; the rest measures threads and
# processes around them). Integer overflow warnings are muted: wrapping is the kernels'
# intended uint arithmetic, which numpy scalars warn about and Numba does not.
NOJIT_TESTS ?= tests/core tests/nextbatch tests/sampler/test_splits.py tests/sampler/test_batch.py
NOJIT_SKIP  := tests/core/test_jit.py tests/nextbatch/test_golden.py \
  tests/nextbatch/test_golden_package.py tests/nextbatch/test_v3_golden.py
test-nojit: $(STAMP)  ## run the kernel tests with the JIT disabled (plain Python, < 5 min)
	NUMBA_DISABLE_JIT=1 $(BIN)/python -m pytest -q $(NOJIT_TESTS) \
	  $(addprefix --ignore=,$(NOJIT_SKIP)) -W 'ignore:overflow encountered:RuntimeWarning'

lint: $(STAMP)  ## ruff (rules in pyproject.toml) and mypy (strict where the types are dlkit's)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)  ## run every benchmark (prints ratios against baselines)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

golden: $(STAMP)  ## regenerate golden files (review the diff before committing!)
	$(BIN)/python fixtures/make_golden.py

# Compiled kernels live in $XDG_CACHE_HOME/dlkit/numba (default ~/.cache; every checkout's),
# or in src/dlkit/core/__pycache__/numba where that is not writable (src/dlkit/core/jit.py).
KERNEL_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dlkit/numba
clean:  ## remove generated outputs and compiled kernels (keeps .venv)
	rm -rf $(OUT) .pytest_cache .hypothesis .mypy_cache .ruff_cache '$(KERNEL_CACHE)'
	rm -rf src/dlkit/core/__pycache__/numba
	find src -name '*.nbi' -o -name '*.nbc' | xargs rm -f
