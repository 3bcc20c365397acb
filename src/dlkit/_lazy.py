"""Package attributes imported on first use (PEP 562).

The kernels behind most of dlkit load numba, half a second before the first line of work;
a package ``__init__`` that imported them eagerly would make every import of anything in it
(``dlkit.errors``, the CLI's ``--help``) pay that. Each package names where its public
attributes live instead, and this module imports the one asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, where: dict[str, tuple[str, ...]],
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, names)`` for ``package``: the module functions serving each
    name of ``where[module]`` from ``module`` (imported on first use, then cached in the
    package) and listing them before that, and the names served, sorted (the package's
    public names, so each is written down once)."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(module_of))

    return __getattr__, __dir__, sorted(module_of)
