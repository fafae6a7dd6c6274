"""One grammar for "how do my records correspond", parsed in one place."""
from __future__ import annotations

import pytest

from vecbridge.errors import InputError
from vecbridge.linking import PairSpec


@pytest.mark.parametrize("text, kind, value", [
    ("ids", "ids", ""), ("field:url", "field", "url"), ("file:links.csv", "file", "links.csv"),
    ("reembed", "reembed", ""), ("reference:texts.txt", "reference", "texts.txt"), ("geh:seeds.json", "geh", "seeds.json"),
    ("unsupervised", "unsupervised", ""), ("file:C:/x.csv", "file", "C:/x.csv")])
def test_every_spelling_reads_back_as_itself(text, kind, value):
    spec = PairSpec.parse(text)
    assert (spec.kind, spec.value, str(spec)) == (kind, value, text)
    assert PairSpec.parse(spec) is spec


@pytest.mark.parametrize("old, new", [("links.csv", "file:links.csv"), ("pairs:a.json", "file:a.json")])
def test_old_spellings_are_read_with_a_warning(old, new):
    with pytest.warns(DeprecationWarning, match=new):
        assert str(PairSpec.parse(old)) == new


@pytest.mark.parametrize("text, message", [("bogus", "unknown pairing"), ("field:", "needs its name"),
                                           ("geh", "needs its path"), ("ids:x", "takes no value")])
def test_bad_spellings_are_one_line_errors(text, message):
    with pytest.raises(InputError, match=message):
        PairSpec.parse(text)


def test_a_command_limits_the_kinds_it_can_use():
    with pytest.raises(InputError, match="cannot be used here; use one of: ids, file:PATH"):
        PairSpec.parse("unsupervised", allowed=("ids", "file"))


def test_artifact_metadata_names_files_without_their_folder():
    assert PairSpec.parse("file:/secret/place/pairs.csv").describe() == {"method": "pairs-file", "file": "pairs.csv"}
    assert PairSpec.parse("field:url").describe() == {"method": "payload-field", "field": "url"}
    assert PairSpec.parse("ids").describe() == {"method": "shared-ids"}
