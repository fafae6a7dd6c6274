"""fit/report errors name what the user knows: how many records were examined, which record id is broken."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.errors import InputError
from vecbridge.jobs.fit import fit_alignment
from vecbridge.jobs.report import compatibility_report
from vecbridge.validation import check_paired, check_vectors


def _plain(path, ids, vectors):
    """A read-only plain layout (vectors.npy + ids.json): the only kind of store that can hold a NaN vector."""
    path.mkdir()
    np.save(path / "vectors.npy", vectors)
    (path / "ids.json").write_text(json.dumps(list(ids)))
    return str(path)


def test_fit_without_shared_ids_reports_the_records_examined(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", [f"o{i}" for i in range(1500)], sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", [f"n{i}" for i in range(1500)], sample.docs_new)
    with pytest.raises(InputError, match=r"1,500 source records examined"):
        fit_alignment(old.url, new.url)
    with pytest.raises(InputError, match=r"400 source records examined"):
        fit_alignment(old.url, new.url, max_pairs=400)
    r = CliRunner().invoke(main, ["fit", "--source", old.url, "--target", new.url, "-o", str(tmp_path / "a.vb")])
    assert r.exit_code == 3 and "1,500 source records examined" in r.output, r.output


def test_fit_summary_reports_records_examined(tmp_path, sample, sample_stores):
    r = CliRunner().invoke(main, ["fit", "--source", sample_stores["old"], "--target", sample_stores["new"],
                                  "--holdout", "0.3", "-o", str(tmp_path / "a.vb")])
    assert r.exit_code == 0, r.output
    assert "1,500 source records examined" in r.output
    r = CliRunner().invoke(main, ["fit", "--source", sample_stores["old"], "--target", sample_stores["new"],
                                  "-o", str(tmp_path / "b.vb"), "--json"])
    anchors = json.loads(r.stdout)["anchors"]
    assert anchors["n_examined"] == 1500 and anchors["n_paired"] == 1500


def test_nan_errors_name_the_record_id(tmp_path, sample):
    X = sample.docs_old.copy()
    X[7, 3] = np.nan
    old = _plain(tmp_path / "old", sample.ids, X)
    new = write_collection(f"file://{tmp_path}/new", sample.ids, sample.docs_new).url
    bad = sample.ids[7]
    with pytest.raises(InputError) as exc:
        fit_alignment(old, new)
    assert f"source record {bad!r} has a NaN or inf vector" in str(exc.value)
    assert "row 7" not in str(exc.value)
    r = CliRunner().invoke(main, ["fit", "--source", old, "--target", new, "-o", str(tmp_path / "a.vb")])
    assert r.exit_code == 3 and f"record {bad!r}" in r.output, r.output
    with pytest.raises(InputError) as exc:
        compatibility_report(old, new, sample=1500)
    assert f"record {bad!r} has a NaN or inf vector" in str(exc.value) and "row " not in str(exc.value)
    # the target side, and the report's new side, too
    Y = sample.docs_new.copy()
    Y[11, 0] = np.inf
    new_bad = _plain(tmp_path / "new_bad", sample.ids, Y)
    with pytest.raises(InputError, match=f"target record {sample.ids[11]!r} has a NaN or inf vector"):
        fit_alignment(write_collection(f"file://{tmp_path}/old2", sample.ids, sample.docs_old).url, new_bad)


def test_validation_names_ids_when_given():
    X = np.ones((3, 4))
    X[1, 2] = np.nan
    with pytest.raises(InputError, match="source record 'b' has a NaN or inf vector"):
        check_vectors(X, "source", ids=["a", "b", "c"])
    with pytest.raises(InputError, match="row 1 contains NaN"):   # no ids: the row, as before
        check_vectors(X, "X_src")
    Z = np.ones((3, 4))
    Z[2] = 0
    with pytest.raises(InputError, match="target record 'c' is all zeros"):
        check_paired(np.ones((3, 4)), Z, names=("source", "target"), ids=(["a", "b", "c"], ["a", "b", "c"]))
