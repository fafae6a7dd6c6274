"""Old import paths kept for one release: each warns once and hands back the object from its new home."""
from __future__ import annotations

import importlib
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
