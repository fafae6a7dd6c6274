"""Public names that moved keep working for one release, with a DeprecationWarning that names the new home."""
from __future__ import annotations

import importlib

import pytest

MOVED = [("vecbridge.migrate", "migrate", "vecbridge.jobs"), ("vecbridge.migrate", "wrap", "vecbridge.jobs"),
         ("vecbridge.migrate", "MappedEmbeddings", "vecbridge.jobs"),
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
