"""The alignment methods a user can choose, in one table read by the CLI, the fit job, the artifact and the report.

Adding a method is one row here (and its estimator): the CLI's ``--method`` choices, the estimator the fit job
builds, the artifact kind that stores it and what the report judges all come from this table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from .baselines import LinearMap, NoMap
from .clustered import ClusteredProcrustes
from .procrustes import OrthogonalProcrustes


@dataclass(frozen=True)
class Method:
    """One way of mapping the old space onto the new one."""

    name: str
    #: the artifact kind that stores a fitted estimator of this method
    kind: str
    #: the estimator class (an artifact recognises a fitted estimator by it)
    estimator: type
    #: ``build(center=, scale=, alpha=, seed=)`` -> an unfitted estimator
    build: Callable[..., object]
    #: True: fits on streamed sums (any number of pairs); False: holds the pairs in memory
    streams: bool
    help: str


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("orthogonal", "orthogonal", OrthogonalProcrustes,
           lambda *, center=False, scale=False, alpha=0.0, seed=0: OrthogonalProcrustes(center=center, scale=scale),
           True, "orthogonal Procrustes: one rotation (the default)"),
    Method("clustered", "clustered", ClusteredProcrustes,
           lambda *, center=False, scale=False, alpha=0.0, seed=0: ClusteredProcrustes(random_state=seed),
           False, "one orthogonal map per cluster of the old space: keeps more retrieval quality"),
    Method("linear", "linear", LinearMap,
           lambda *, center=False, scale=False, alpha=0.0, seed=0: LinearMap(alpha=0.0, fit_intercept=center),
           True, "unconstrained least squares (a baseline)"),
    Method("ridge", "linear", LinearMap,
           lambda *, center=False, scale=False, alpha=0.01, seed=0: LinearMap(alpha=alpha, fit_intercept=center),
           True, "ridge-regularised least squares (a baseline)"),
    Method("none", "identity", NoMap,
           lambda *, center=False, scale=False, alpha=0.0, seed=0: NoMap(), True, "no map (the do-nothing baseline)"),
)}


def method(name: str) -> Method:
    """The method called ``name``; an unknown name is a one-line error listing the others."""
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(f"unknown alignment method {name!r} (choose from {', '.join(METHODS)})") from None


def kind_of(estimator) -> str:
    """The artifact kind of a fitted estimator (the most specific class in the table wins)."""
    for cls in type(estimator).__mro__:
        for m in METHODS.values():
            if m.estimator is cls:
                return m.kind
    raise InputError(f"{type(estimator).__name__} is not an alignment method vecbridge can save "
                     f"(known: {', '.join(sorted({m.estimator.__name__ for m in METHODS.values()}))})")
