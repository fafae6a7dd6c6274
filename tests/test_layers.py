"""The floor plan: stores -> pairs -> estimators -> jobs -> CLI, and nothing imports upward.

Every ``vecbridge`` module is given a layer; a module may import its own layer and the layers below it. The
algorithm packages (``align``, ``linking``) are pure numpy: they never see a store. Deprecated aliases of moved
modules are listed apart: they only re-export.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vecbridge"

#: layer of each top-level part of the package (module or sub-package), bottom first: the floor plan of
#: docs/design.md. ground -> scorers and estimators (pure numpy) -> stores -> pairings and the runtime -> serving ->
#: jobs (the verbs) -> renderers -> the HTTP service -> the CLI and the integrations with other frameworks
LAYERS = {
    "ground": ["_version", "_blas", "_deprecated", "errors", "fs", "results", "validation", "vectors", "metrics",
               "numeric", "sample", "faultpoint", "records", "secrets"],
    "estimators": ["quality", "align", "linking"],
    "stores": ["connectors"],
    "plumbing": ["pairing", "runtime"],
    "serving": ["serving"],
    "jobs": ["jobs"],
    "renderers": ["render"],
    "service": ["service"],
    "cli": ["cli", "integrations", "__init__", "__main__"],
}
RANK = {part: rank for rank, parts in enumerate(LAYERS.values()) for part in parts}
#: the pure-numpy packages never see a store
NO_STORES = {"linking", "align", "quality"}


def _is_shim(path: Path) -> bool:
    """A module kept for one release under its old name: it only hands back objects from their new home."""
    import re

    text = path.read_text()
    return "__getattr__ = moved(" in text and not re.search(r"^(def|class) |^from \.+(?!_deprecated)\w", text, re.M)


#: modules kept for one release under their old names; they import the new place and warn
DEPRECATED = {
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts[:-1] if p.name == "__init__.py"
             else p.relative_to(PACKAGE).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py") if _is_shim(p)}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" and len(rel.parts) > 1 else rel.parts
    return ".".join(parts)


def _parse(text: str) -> ast.Module:
    """``ast.parse``, again when CPython 3.11 (before 3.11.8) confuses its depth counter with another thread's AST
    work (a thread an earlier test left formatting a traceback): a SystemError that says nothing about the file."""
    for _ in range(4):
        try:
            return ast.parse(text)
        except SystemError:
            continue
    return ast.parse(text)


def _imports(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, imported vecbridge module) for every import of our own code in the file."""
    tree = _parse(path.read_text())
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
    missing = {_top(_module_name(p)) for p in PACKAGE.rglob("*.py") if not _is_shim(p)} - set(RANK)
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


def test_the_cli_imports_only_jobs_renderers_the_runtime_and_the_bottom_layer():
    """The CLI parses and prints; whatever opens a store or fits a map is a job (the runtime gives it engines)."""
    allowed = {"jobs", "render", "runtime", "serving", "service", "cli"} | set(LAYERS["ground"])
    wrong = []
    for path in [PACKAGE / "cli.py", *sorted((PACKAGE / "cli").rglob("*.py"))]:
        if path.exists():
            name = _module_name(path)
            wrong += [f"{name}:{line} imports {target}" for line, target in _imports(path, name)
                      if _top(target) not in allowed]
    assert not wrong, "\n".join(wrong)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if not _is_shim(p)}


def _resolve(target: str, modules: dict) -> str | None:
    """The module file an import names (``pkg.mod.name`` -> ``pkg.mod`` where ``name`` is not a module)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target if target in modules else None


def test_no_import_circles_between_files():
    """Every import counts, the ones inside functions too: a circle there is still two files that need each other.
    A package's ``__init__`` that re-exports its own modules is not a circle with them."""
    modules = _modules()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for _, target in _imports(path, name):
            dep = _resolve(target, modules)
            if dep and dep != name and not (path.name == "__init__.py" and dep.startswith(name + ".")) \
                    and not (modules[dep].name == "__init__.py" and name.startswith(dep + ".")):
                graph[name].add(dep)
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(" <-> ".join(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "import circles: " + "; ".join(circles)
