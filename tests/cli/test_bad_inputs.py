"""Bad inputs answer one line and an exit code that means something, found before anything is written: damaged
file-store files, altered alignment files, binary pairs files, damaged or unwritable state files, unparseable URLs,
usage errors, and the one rule for the ids of --queries."""
from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.align.artifact import _digest
from vecbridge.cli import main
from vecbridge.connectors import connect

N = 300


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, code, *words):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].lower().startswith("error:"), result.output
    for word in words:
        assert word in lines[0], result.output
    return lines[0]


@pytest.fixture
def align(tmp_path, sample):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = OrthogonalProcrustes().fit(sample.docs_old[:N], sample.docs_new[:N])
    return Alignment.from_estimator(est).save(tmp_path / "align.vb")


# --- 5. the file store's own files --------------------------------------------------------------------------------------
def plain_dir(tmp_path, sample, name, ids_text: bytes, payload_text: bytes, n: int = N):
    d = tmp_path / name
    d.mkdir()
    np.save(d / "vectors.npy", sample.docs_old[:n])
    (d / "ids.json").write_bytes(ids_text)
    (d / "payloads.jsonl").write_bytes(payload_text)
    return f"file://{d}"


def _ids(sample, n=N):
    return json.dumps(sample.ids[:n]).encode()


def _payloads(n=N):
    return b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(n))


BAD_PLAIN = {
    "payload not UTF-8": (lambda s: _ids(s), lambda: _payloads().replace(b'{"n": 250}', b'{"n": "\xff\xfe"}'),
                          "line 251", "UTF-8"),
    "truncated ids": (lambda s: _ids(s)[:-40], lambda: _payloads(), "ids.json", "JSON"),
    "an id that is a list": (lambda s: json.dumps([[1, 2]] + s.ids[1:N]).encode(), lambda: _payloads(),
                             "[1, 2]", "string or an integer"),
    "a payload that is not an object": (lambda s: _ids(s), lambda: _payloads().replace(b'{"n": 250}', b"[250]"),
                                        "line 251", "not a JSON object"),
    "an id twice, in different batches": (lambda s: json.dumps(s.ids[:N - 1] + [s.ids[0]]).encode(),
                                          lambda: _payloads(), "duplicate id", "in the source"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLAIN))
def test_bad_plain_file_layouts_are_refused_before_anything_is_written(tmp_path, sample, align, case):
    ids, payloads, *words = BAD_PLAIN[case]
    url = plain_dir(tmp_path, sample, "src", ids(sample), payloads())
    for args in (["info", url],
                 ["migrate", url, "--alignment", align, "--to", f"file://{tmp_path}/new", "--batch-size", 100],
                 ["migrate", url, "--alignment", align, "--to", f"file://{tmp_path}/new", "--batch-size", 100,
                  "--resume"]):
        one_line_error(run(*args), 3, *words)
    assert not (tmp_path / "new").exists()
    assert not list(tmp_path.glob("align.vb.*.json"))   # no checkpoint either


def test_a_damaged_segment_payload_is_one_line(tmp_path, sample):
    url = f"file://{tmp_path}/c"
    write_collection(url, sample.ids[:20], sample.docs_old[:20], [{"n": i} for i in range(20)])
    meta = next((tmp_path / "c" / "segments").glob("*.meta.npz"))
    with np.load(meta) as z:
        arrays = dict(z)
    arrays["payloads_json"] = np.frombuffer(b"[\xff\xfe" + arrays["payloads_json"].tobytes()[3:], np.uint8)
    with open(meta, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(Exception) as err:
        list(connect(url).scan())
    assert type(err.value).__name__ == "StoreError" and "damaged" in str(err.value)


# --- 2 and 6. altered alignment files -----------------------------------------------------------------------------------
def rewrite_metadata(path, edit) -> None:
    """Change the artifact's metadata (or tensors) and recompute its checksum, as a hand-edited file would be."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="np") as fh:
        meta = json.loads(fh.metadata()["vecbridge"])
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    meta = edit(meta, tensors)
    if isinstance(meta, dict):
        meta["sha256"] = _digest(meta, tensors)
    save_file(tensors, str(path), metadata={"vecbridge": json.dumps(meta)})


def _set(key, value):
    def edit(meta, tensors):
        meta[key] = value
        return meta
    return edit


def _nan_matrix(meta, tensors):
    tensors["matrix"][0, 0] = np.nan
    return meta


def _wrong_shape(meta, tensors):
    tensors["source_mean"] = tensors["source_mean"][:-1].copy()
    return meta


ALTERED = {
    "scale 0": (_set("scale", 0), "scale"),
    "scale NaN-like text": (_set("scale", "1.0"), "scale"),
    "unknown normalization": (_set("normalization", "cube"), "normalization"),
    "unknown metric": (_set("metric", "manhattan"), "metric"),
    "negative dimension": (_set("source_dim", -384), "source_dim"),
    "dimension as text": (_set("target_dim", "768"), "target_dim"),
    "fit is a list": (_set("fit", [1, 2]), "fit"),
    "metadata is a list": (lambda meta, tensors: [meta], "not an object"),
    "NaN in the matrix": (_nan_matrix, "NaN"),
    "mean of the wrong shape": (_wrong_shape, "source_mean"),
}


@pytest.mark.parametrize("case", sorted(ALTERED))
def test_altered_alignment_metadata_is_refused_even_with_its_checksum(tmp_path, sample, align, case):
    edit, word = ALTERED[case]
    rewrite_metadata(align, edit)
    src = write_collection(f"file://{tmp_path}/src", sample.ids[:50], sample.docs_old[:50])
    one_line_error(run("info", align), 5, word)
    one_line_error(run("migrate", src.url, "--alignment", align, "--to", f"file://{tmp_path}/new"), 5, word)
    assert not (tmp_path / "new").exists()


# --- 6. binary pairs files, state files, URLs ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pairs.csv", "pairs.json", "pairs.npz"])
def test_a_binary_pairs_file_is_bad_input(tmp_path, sample, name):
    src = write_collection(f"file://{tmp_path}/src", sample.ids[:50], sample.docs_old[:50])
    dst = write_collection(f"file://{tmp_path}/dst", sample.ids[:50], sample.docs_new[:50])
    pairs = tmp_path / name
    pairs.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 8)
    r = run("fit", "--source", src.url, "--target", dst.url, "--pairs", f"file:{pairs}", "-o", tmp_path / "a.vb")
    one_line_error(r, 3, name)
    assert not (tmp_path / "a.vb").exists()


@pytest.fixture
def upgrade_state(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:N], sample.docs_old[:N],
                           [{"text": it["doc"]} for it in sample.items[:N]])
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", "tests.embedders:mpnet_lookup", "--to",
            f"file://{tmp_path}/new", "--state", state, "--fit-sample", 100)
    assert r.exit_code == 0, r.output
    return {"old": old.url, "state": state}


def test_a_state_whose_meta_is_not_json_is_one_line(tmp_path, upgrade_state):
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(upgrade_state["state"], damaged)
    with sqlite3.connect(damaged) as con:
        con.execute("UPDATE meta SET doc = '{not json'")
    for command in ("status", "reembed"):
        one_line_error(run("upgrade", command, "--state", damaged), 3)


def test_a_state_in_a_read_only_folder_is_refused_before_anything_is_written(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:N], sample.docs_old[:N],
                           [{"text": it["doc"]} for it in sample.items[:N]])
    ro = tmp_path / "ro"
    ro.mkdir()
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode:
        pytest.skip("cannot make a folder read-only here (chattr +i refused)")
    try:
        r = run("upgrade", "start", old.url, "--to-model", "tests.embedders:mpnet_lookup", "--to",
                f"file://{tmp_path}/new", "--state", ro / "u.upgrade.sqlite", "--fit-sample", 100, "--json")
    finally:
        subprocess.run(["chattr", "-i", str(ro)], check=True)
    one_line_error(r, 4)
    assert not (tmp_path / "new").exists() and not list(ro.iterdir())


@pytest.mark.parametrize("url", ["postgresql://u:secret@localhost:notaport/db?table=t",
                                 "postgresql://u:secret@[::1/db?table=t", "qdrant://localhost:63x3/docs",
                                 "milvus://localhost:port/items", "chroma://localhost:80a/docs"])
def test_an_unparseable_url_is_bad_input(tmp_path, align, url):
    for args in (["info", url], ["migrate", url, "--alignment", align, "--to", f"file://{tmp_path}/new"]):
        line = one_line_error(run(*args), 3, "invalid URL")
        assert "secret" not in line
    assert not (tmp_path / "new").exists()


# --- 9. usage errors ----------------------------------------------------------------------------------------------------
def test_usage_errors_exit_2(tmp_path, sample, align):
    src = write_collection(f"file://{tmp_path}/src", sample.ids[:50], sample.docs_old[:50])
    r = run("migrate", src.url, "--alignment", align)
    assert r.exit_code == 2 and "--to" in r.output and "--field" in r.output, r.output
    one_line_error(run("info", "redis://x/y"), 2, "unknown store scheme 'redis'")
    one_line_error(run("migrate", "redis://x/y", "--alignment", align, "--to", f"file://{tmp_path}/n"), 2, "redis")
    assert not (tmp_path / "n").exists()


# --- 8. one rule for the ids of --queries -------------------------------------------------------------------------------
def test_the_same_queries_serve_evaluate_and_report_with_field_pairs(tmp_path, sample):
    """OLD and NEW share no id, only a payload key; the queries' ids are OLD's ids of their relevant documents."""
    keys = [{"key": i} for i in sample.ids]
    old = write_collection(f"file://{tmp_path}/old", [f"o-{i}" for i in sample.ids], sample.docs_old, keys)
    new = write_collection(f"file://{tmp_path}/new", [f"n-{i}" for i in sample.ids], sample.docs_new, keys)
    queries = write_collection(f"file://{tmp_path}/q", [f"o-{i}" for i in sample.ids[1000:]], sample.queries_new)
    out = tmp_path / "a.vb"
    r = run("fit", "--source", old.url, "--target", new.url, "--pairs", "field:key", "--holdout", 0.3, "-o", out)
    assert r.exit_code == 0, r.output
    r = run("evaluate", "--alignment", out, "--source", old.url, "--target", new.url, "--pairs", "field:key",
            "--queries", queries.url, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["retrieval"]["n_queries"] > 50
    r = run("report", old.url, new.url, "--pairs", "field:key", "--queries", queries.url, "--sample", 1500, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["retrieval"]["n_queries"] > 50
    for command in ("evaluate", "report"):
        assert "relevant document's id in" in " ".join(run(command, "--help").output.split())
