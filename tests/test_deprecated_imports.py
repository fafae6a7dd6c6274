"""Public names that moved keep working for one release, with a DeprecationWarning that names the new home."""
from __future__ import annotations

import importlib

import pytest

MOVED = [("vecbridge.migrate", "migrate", "vecbridge.jobs"), ("vecbridge.migrate", "wrap", "vecbridge.jobs"),
         ("vecbridge.migrate", "MappedEmbeddings", "vecbridge.jobs"),
         ("vecbridge.serving.translate", "MappedEmbeddings", "vecbridge.serving.embedder"),
         ("vecbridge.jobs.wrap", "MappedEmbeddings", "vecbridge.serving.embedder"),
         ("vecbridge.checks", "evaluate_alignment", "vecbridge.jobs"),
         ("vecbridge.linking", "MiniVec2Vec", "vecbridge.align"),
         ("vecbridge.linking", "read_pairs_file", "vecbridge.pairing.pairs"),
         ("vecbridge.linking", "iter_pairs", "vecbridge.pairing.spec")]


@pytest.mark.parametrize("old, name, new", MOVED)
def test_old_import_paths_warn_and_give_the_same_object(old, name, new):
    with pytest.warns(DeprecationWarning, match=f"moved to {new}"):
        obj = getattr(importlib.import_module(old), name)
    assert obj is getattr(importlib.import_module(new), name)


def test_unknown_names_still_raise():
    with pytest.raises(AttributeError):
        importlib.import_module("vecbridge.migrate").no_such_thing


@pytest.mark.parametrize("name, job", [("migrate_on_ray", "migrate"), ("merge_on_ray", "merge")])
def test_the_removed_ray_twins_run_the_job_on_the_ray_engine(name, job, monkeypatch):
    """``migrate_on_ray(..., workers=, ray_address=, ranges_per_worker=)`` is ``migrate(..., engine=RayEngine(...))``
    for one release, with a warning that names the replacement."""
    pytest.importorskip("ray")
    import vecbridge.jobs as jobs

    calls = []
    monkeypatch.setattr(jobs, job, lambda *args, **options: calls.append((args, options)) or "done")
    with pytest.warns(DeprecationWarning, match=f"vecbridge.jobs.{name} is replaced by .*{job}"):
        twin = getattr(jobs, name)
    assert twin("src", "a.vb", workers=3, ray_address="127.0.0.1:1", ranges_per_worker=2, batch_size=7) == "done"
    (args, options), = calls
    engine = options.pop("engine")
    assert args == ("src", "a.vb") and options == {"batch_size": 7}
    assert (engine.name, engine.workers, engine.address, engine.units_per_worker) == ("ray", 3, "127.0.0.1:1", 2)
