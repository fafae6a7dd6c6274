"""The floor plan: stores -> pairs -> estimators -> jobs -> CLI, and nothing imports upward.

Every ``vecbridge`` module is given a layer; a module may import its own layer and the layers below it. The
algorithm packages (``align``, ``linking``) are pure numpy: they never see a store. Deprecated aliases of moved
modules are listed apart: they only re-export.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vecbridge"

#: layer of each top-level part of the package (module or sub-package), bottom first
LAYERS = {
    "base": ["_version", "_blas", "_deprecated", "errors", "fs", "results", "validation", "vectors", "metrics", "numeric",
             "sample", "faultpoint"],
    "stores": ["connectors"],
    "pairs": ["linking"],
    "estimators": ["align"],
    "renderers": ["render"],
    "jobs": ["jobs", "ray"],
    "cli": ["cli", "__init__", "__main__"],
}
RANK = {part: rank for rank, parts in enumerate(LAYERS.values()) for part in parts}
#: the algorithm packages may use the bottom layer and each other's lower layers, never a store
NO_STORES = {"linking", "align"}
#: modules kept for one release under their old names; they import the new place and warn
DEPRECATED = {"migrate", "checks"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" and len(rel.parts) > 1 else rel.parts
    return ".".join(parts)


def _imports(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, imported vecbridge module) for every import of our own code in the file."""
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("vecbridge"):
                target = node.module[len("vecbridge."):] if node.module != "vecbridge" else ""
            else:
                continue
            targets = [f"{target}.{a.name}".strip(".") for a in node.names] if not node.module else [target]
            found += [(node.lineno, t) for t in targets]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name[len("vecbridge."):]) for a in node.names if a.name.startswith("vecbridge.")]
    return found


def _top(module: str) -> str:
    return module.split(".")[0] if module else "__init__"


def _deprecated(module: str) -> bool:
    return any(module == d or module.startswith(d + ".") for d in DEPRECATED)


def test_every_module_has_a_layer():
    missing = {_top(_module_name(p)) for p in PACKAGE.rglob("*.py")} - set(RANK) - {d.split(".")[0] for d in DEPRECATED}
    assert not missing, f"give these a layer in LAYERS: {sorted(missing)}"


def test_nothing_imports_upward():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        if _deprecated(name):
            continue
        top = _top(name)
        for line, target in _imports(path, name):
            target_top = _top(target)
            if target_top == top:
                continue
            if _deprecated(target):
                upward.append(f"{name}:{line} imports the deprecated {target}")
            elif RANK.get(target_top, 99) > RANK.get(top, -1):
                upward.append(f"{name}:{line} imports {target} (layer {RANK.get(target_top)} > {RANK.get(top)})")
            elif top in NO_STORES and target_top == "connectors":
                upward.append(f"{name}:{line}: {top} is pure numpy but imports {target}")
    assert not upward, "\n".join(upward)


def test_the_cli_imports_only_jobs_renderers_and_the_bottom_layer():
    """The CLI parses and prints; whatever opens a store or fits a map is a job."""
    allowed = {"jobs", "render"} | set(LAYERS["base"])
    path = PACKAGE / "cli.py"
    wrong = [f"cli:{line} imports {target}" for line, target in _imports(path, "cli") if _top(target) not in allowed]
    assert not wrong, "\n".join(wrong)
