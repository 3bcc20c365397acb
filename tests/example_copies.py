"""The bundled example database under another name: mixtures need distinct database ids."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "example_db"


def example_named(root: Path, name: str, embedder: Any = None) -> Path:
    """The bundled example preprocessed into ``root/name`` as database ``name`` (its
    ``dlkit.toml`` renamed), embedded by ``embedder`` (default: the default embedder)."""
    from dlkit.db import preprocess

    source = root / f"{name}-source"
    shutil.copytree(EXAMPLE, source)
    toml = source / "dlkit.toml"
    text = toml.read_text(encoding="utf-8")
    assert 'name = "example-shop"' in text
    toml.write_text(text.replace('name = "example-shop"', f'name = "{name}"'), encoding="utf-8")
    preprocess(source, root / name, fsync=False, embedder=embedder)
    return root / name
