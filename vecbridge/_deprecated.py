"""Old import paths kept for one release: each warns once and hands back the object from its new home."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import warnings


def moved(old: str, names: dict[str, str]):
    """A module ``__getattr__`` for ``old`` whose ``names`` now live in other modules (``name -> "pkg.module"``)."""

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        new = names[name]
        warnings.warn(f"{old}.{name} moved to {new}.{name}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__


def on_engine(old: str, new: str, job, make_engine):
    """A removed ``*_on_ray(..., workers=, ray_address=, ranges_per_worker=)`` entry point, kept for one release (it
    warns, as :func:`moved` does, when it is looked up): ``job(..., engine=make_engine("ray", ...))``, the job itself
    on the Ray engine. ``new``: the job's public name, for the warning."""
    warnings.warn(f"{old} is replaced by {new}(..., engine=RayEngine(workers=...)); the old name goes in the next "
                  f"release", DeprecationWarning, stacklevel=3)

    def twin(*args, workers: int = 2, ray_address: str | None = None, ranges_per_worker: int | None = None,
             **options):
        engine = make_engine("ray", workers=workers, ray_address=ray_address, units_per_worker=ranges_per_worker)
        return job(*args, engine=engine, **options)

    twin.__name__ = twin.__qualname__ = old.rpartition(".")[2]
    return twin


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Modules that moved, importable under their old names for one release: ``old -> new module`` (every name
    moved there) or ``old -> {name: new module}`` (a module split in two). Importing one makes a small module that
    hands each name over from its new home with a :class:`DeprecationWarning`, as :func:`moved` does; the old
    files are gone."""

    def __init__(self, table: dict[str, "str | dict[str, str]"]):
        self.table = table

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname in self.table:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None   # the default: an empty module, filled by exec_module

    def exec_module(self, module) -> None:
        old, new = module.__name__, self.table[module.__name__]
        where = new if isinstance(new, str) else ", ".join(sorted(set(new.values())))
        module.__doc__ = f"Deprecated: moved to {where}."
        module.__getattr__ = moved(old, new) if isinstance(new, dict) else _forward(old, new)


def _forward(old: str, new: str):
    """A module ``__getattr__`` for ``old`` whose every name now lives in ``new``."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = importlib.import_module(new)
        if not hasattr(target, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old}.{name} moved to {new}.{name}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(target, name)

    return __getattr__
