"""Print the import graph between dlkit's sub-packages: ``package -> package  count``.

A node is a sub-package of ``dlkit`` (``core``, ``db``, ...) or a top-level module
(``errors``, ``atomic``, ...); an edge counts the import statements in the source package that
name something in the target, lazy imports inside functions and ``TYPE_CHECKING`` blocks
included (a layering rule holds for every import, not only the ones run at start-up).
Given a sub-package and its dotted name, the nodes are its rooms instead: ``dlkit.db``'s
sub-packages (``schema``, ``read``, ``write``) and modules (``format``, ``manifest``, ...),
counting only the imports between them.

    python scripts/import_graph.py [src/dlkit]
    python scripts/import_graph.py src/dlkit/db dlkit.db
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = "dlkit"


def node_of(module: str, package: str = PACKAGE) -> str:
    """``dlkit.db.read.reader`` -> ``db`` (within ``dlkit.db``: ``read``); the package itself
    -> its last name (``dlkit``, ``db``)."""
    parts = module.split(".")
    depth = len(package.split("."))
    return parts[depth] if len(parts) > depth else parts[-1]


def module_name(root: Path, path: Path, package: str = PACKAGE) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = package.split(".") + list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool,
                     submodules: frozenset[str], package: str = PACKAGE) -> list[str]:
    """Every module of ``package`` one file imports (relative imports resolved);
    ``submodules`` are the names directly under it, to tell ``from dlkit import db`` from
    ``__version__``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from dlkit import db`` names the sub-package, not dlkit's __init__
            if target == package:
                found.extend(f"{package}.{alias.name}" if alias.name in submodules else package
                             for alias in node.names)
            else:
                found.append(target)
    return [name for name in found if name == package or name.startswith(package + ".")]


def import_graph(root: Path, package: str = PACKAGE) -> Counter[tuple[str, str]]:
    """(source node, target node) -> number of import statements; self-edges left out.
    ``root`` is the directory of ``package`` (``src/dlkit`` for ``dlkit``)."""
    edges: Counter[tuple[str, str]] = Counter()
    submodules = frozenset(path.stem for path in root.glob("*.py")) | frozenset(
        path.parent.name for path in root.glob("*/__init__.py"))
    for path in sorted(root.rglob("*.py")):
        module = module_name(root, path, package)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        source = node_of(module, package)
        for target in imported_modules(tree, module, path.name == "__init__.py", submodules,
                                       package):
            if node_of(target, package) != source:
                edges[(source, node_of(target, package))] += 1
    return edges


def render(edges: Counter[tuple[str, str]]) -> str:
    width = max((len(source) for source, _ in edges), default=0)
    return "\n".join(f"{source:<{width}} -> {target:<12} {count:>3}"
                     for (source, target), count in sorted(edges.items()))


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "src" / PACKAGE
    print(render(import_graph(root, argv[1] if len(argv) > 1 else PACKAGE)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
