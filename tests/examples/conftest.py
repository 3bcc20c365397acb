"""Shared fixtures of the example tests: tiny planted-signal databases, built once a session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.examples.launch import REPO


def _fixture_module(file: str):
    """fixtures/``file``, imported by path (fixtures/ is not a package) under the name
    fixtures/make_planted_mixture.py gives make_planted_db.py, so both share one module."""
    name = f"dlkit_fixture_{file.removesuffix('.py')}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "fixtures" / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _planted_module():
    """fixtures/make_planted_db.py."""
    return _fixture_module("make_planted_db.py")


def _mixture_module():
    """fixtures/make_planted_mixture.py."""
    return _fixture_module("make_planted_mixture.py")


@pytest.fixture(scope="session")
def planted_db_factory(tmp_path_factory):
    """``make(variant="churn", seed=0, scale=0.1) -> (database dir, task)``: the planted
    dataset preprocessed into a database, built once per session for each arguments."""
    from dlkit.db import preprocess

    built: dict[tuple[str, int, float], tuple[Path, str]] = {}

    def make(variant: str = "churn", seed: int = 0, scale: float = 0.1) -> tuple[Path, str]:
        key = (variant, seed, scale)
        if key not in built:
            root = tmp_path_factory.mktemp(f"planted-{variant}-{seed}")
            planted = _planted_module().make_planted(root / "source", variant, seed, scale)
            preprocess(root / "source", root / "db", fsync=False)
            built[key] = (root / "db", planted.task)
        return built[key]

    return make


@pytest.fixture(scope="session")
def planted_db(planted_db_factory) -> tuple[Path, str]:
    """The tiny churn database (240 users; boolean target) and its task name."""
    return planted_db_factory("churn", 0, 0.1)


# The databases examples/pretrain.py is tested on: three pretrained on (two of the churn
# signal, one of the grand one), the last held out.
MIXTURE_MEMBERS = (("churn", "shop"), ("churn", "bank"), ("grand", "retail"), ("churn", "club"))


@pytest.fixture(scope="session")
def mixture_dbs(tmp_path_factory) -> list[Path]:
    """``MIXTURE_MEMBERS`` at scale 0.1, seed 2, preprocessed: their database directories."""
    from dlkit.db import preprocess

    gen = _mixture_module()
    root = tmp_path_factory.mktemp("mixture")
    out = []
    for family, variant in MIXTURE_MEMBERS:
        name = gen.member_name(family, variant)
        gen.make_member(root / "source" / name, family, variant, seed=2, scale=0.1)
        preprocess(root / "source" / name, root / "db" / name, fsync=False)
        out.append(root / "db" / name)
    return out
