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


#: modules that moved in the renovation of the package's rooms, importable under their old names for one release
MOVED_MODULES: dict[str, "str | dict[str, str]"] = {
    "vecbridge.jobs.checkpoint": "vecbridge.runtime.checkpoint",
    "vecbridge.jobs.guard": "vecbridge.runtime.guard",
    "vecbridge.jobs.open": "vecbridge.runtime.open",
    "vecbridge.jobs.pipeline": "vecbridge.runtime.pipeline",
    "vecbridge.jobs.options": "vecbridge.quality.options",
    "vecbridge.jobs.pair_spec": "vecbridge.pairing.spec",
    "vecbridge.jobs.pairs": "vecbridge.pairing.pairs",
    "vecbridge.jobs.upgrade_state": "vecbridge.jobs.upgrade.state",
    "vecbridge.ray": "vecbridge.integrations.ray",
    "vecbridge.jobs.reembed": {
        **dict.fromkeys(["Embedder", "load_model"], "vecbridge.runtime.models"),
        **dict.fromkeys(["read_texts", "reembed_pairs", "reference_pairs"], "vecbridge.pairing.reembed")},
    "vecbridge.jobs.rerank": {
        **dict.fromkeys(["augment_documents", "augment_queries", "fused_scores", "hub_penalty", "rerank_candidates"],
                        "vecbridge.quality.scoring"),
        **dict.fromkeys(["FusedSearch", "HubPenalizedSearch", "RerankedSearch", "fused_search"],
                        "vecbridge.serving.rerank")},
    "vecbridge.jobs.wrap": {
        "MappedEmbeddings": "vecbridge.serving.embedder", "translate_queries": "vecbridge.serving.translate",
        **dict.fromkeys(["WrappedCollection", "attach_field", "federated_search", "search_collections", "wrap"],
                        "vecbridge.serving.wrap")},
}


#: the Ray twins of the jobs, replaced by ``engine=``: old name in :mod:`vecbridge.jobs` -> the job that now runs on
#: the Ray engine (``module:attribute``)
RAY_TWINS = {
    "migrate_on_ray": "vecbridge.jobs:migrate", "merge_on_ray": "vecbridge.jobs:merge",
    "reembed_on_ray": "vecbridge.jobs:Upgrade.reembed", "fit_on_ray": "vecbridge.jobs.fit:fit_alignment",
    "verify_on_ray": "vecbridge.jobs:verify", "evaluate_on_ray": "vecbridge.jobs:evaluate_alignment",
    "report_on_ray": "vecbridge.jobs:compatibility_report",
}


def ray_twin(package: str, name: str, make_engine):
    """``package.name`` for a name of :data:`RAY_TWINS` (see :func:`on_engine`); AttributeError for any other."""
    if name not in RAY_TWINS:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, _, attr = RAY_TWINS[name].partition(":")
    job = importlib.import_module(module)
    for part in attr.split("."):
        job = getattr(job, part)
    return on_engine(f"{package}.{name}", f"{module}.{attr}", job, make_engine)
