"""A catalogue of bad inputs, one command line per row. Each must end with one error line on stderr (click's own
usage text may precede a usage error's line), an exit code that says what was wrong (2 usage, 3 input, 4 store,
5 artifact), no traceback, and nothing written: every file under the case's folder (its collections, alignments,
checkpoints, state files: the commands run there) keeps its bytes and nothing appears, and on PostgreSQL the source
table keeps its rows and no new table appears.

Placeholders: ``{dir}`` the case's own copy of the template folder (the working directory), ``{align}`` a good
alignment (old model -> new model), ``{pg}`` a PostgreSQL+pgvector source table, ``{pgnew}`` a table that must
not appear, ``{pghost}`` the server's ``postgresql://USER@HOST:PORT/DB``, ``{ro}`` a read-only folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.cli import main
from vecbridge.connectors import connect

from .conftest import MODEL, old_records, snapshot, write

USAGE, INPUT, STORE, ARTIFACT = 2, 3, 4, 5
M = ["--alignment", "{align}", "--to", "file://{dir}/t"]   # the rest of a migrate command line


def case(name: str, *args: str, code):
    return pytest.param(list(args), code if isinstance(code, set) else {code}, id=name)


CASES = [
    # --- store URLs -------------------------------------------------------------------------------------------------
    case("unknown-scheme-source", "migrate", "redis://x/y", *M, code=USAGE),
    case("unknown-scheme-target", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to", "redis://x/y",
         code=USAGE),
    case("unknown-scheme-info", "info", "redis://x/y", code=USAGE),
    case("misspelled-option-file-source", "migrate", "file://{dir}/src?vectr=x", *M, code=INPUT),
    case("misspelled-option-file-target", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to",
         "file://{dir}/t?metirc=dot", code=INPUT),
    case("misspelled-option-pgvector", "migrate", "{pg}&vectr=x", "--alignment", "{align}", "--to", "{pgnew}",
         code=INPUT),
    case("misspelled-option-qdrant-edge", "migrate", "qdrant-edge://{dir}/nope?vectr=x", *M, code=INPUT),
    case("port-not-a-number-pgvector", "migrate", "postgresql://u:secret@127.0.0.1:notaport/db?table=t", *M,
         code=INPUT),
    case("port-not-a-number-qdrant", "migrate", "qdrant://localhost:abc/coll", *M, code=INPUT),
    case("port-out-of-range-milvus", "migrate", "milvus://127.0.0.1:99999/coll", *M, code=INPUT),
    case("qdrant-edge-with-a-host", "migrate", "qdrant-edge://somehost/shard", *M, code=INPUT),
    case("empty-source-url", "migrate", "", *M, code={USAGE, INPUT}),
    # --- missing and empty collections ------------------------------------------------------------------------------
    case("missing-source", "migrate", "file://{dir}/nope", *M, code=STORE),
    case("missing-pgvector-table", "migrate", "{pghost}?table=no_such_table", "--alignment", "{align}", "--to",
         "{pgnew}", code=STORE),
    case("empty-source", "migrate", "file://{dir}/empty", *M, code=INPUT),
    case("merge-missing-b", "merge", "file://{dir}/src", "file://{dir}/nope", "--into", "file://{dir}/t",
         "--alignment", "{align}", code=STORE),
    case("fit-missing-target", "fit", "--source", "file://{dir}/src", "--target", "file://{dir}/nope", "-o",
         "{dir}/x.vb", code=STORE),
    case("info-missing", "info", "file://{dir}/nope", code=STORE),
    case("upgrade-start-missing-source", "upgrade", "start", "file://{dir}/nope", "--to-model", MODEL, "--to",
         "file://{dir}/t", "--state", "{dir}/n.upgrade.sqlite", code=STORE),
    case("upgrade-start-empty-source", "upgrade", "start", "file://{dir}/empty", "--to-model", MODEL, "--to",
         "file://{dir}/t", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    # --- dimensions -------------------------------------------------------------------------------------------------
    case("source-dim-differs-from-alignment", "migrate", "file://{dir}/wrong_dim", *M, code=INPUT),
    case("merge-b-dim-differs-from-alignment", "merge", "file://{dir}/src", "file://{dir}/src2", "--into",
         "file://{dir}/t", "--alignment", "{align}", code=INPUT),
    case("upgrade-start-alignment-dim-differs", "upgrade", "start", "file://{dir}/wrong_dim", "--to-model", MODEL,
         "--to", "file://{dir}/t", "--alignment", "{align}", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    # --- damaged alignment artifacts --------------------------------------------------------------------------------
    case("alignment-missing", "migrate", "file://{dir}/src", "--alignment", "{dir}/nope.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-truncated", "migrate", "file://{dir}/src", "--alignment", "{dir}/truncated.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-flipped-byte", "migrate", "file://{dir}/src", "--alignment", "{dir}/flipped.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-empty-file", "migrate", "file://{dir}/src", "--alignment", "{dir}/empty.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-text-file", "migrate", "file://{dir}/src", "--alignment", "{dir}/text.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-scale-0-resigned", "migrate", "file://{dir}/src", "--alignment", "{dir}/scale0.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-unknown-normalization-resigned", "migrate", "file://{dir}/src", "--alignment",
         "{dir}/normalization.vb", "--to", "file://{dir}/t", code=ARTIFACT),
    case("alignment-metadata-a-json-list", "migrate", "file://{dir}/src", "--alignment", "{dir}/metalist.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-nan-matrix-resigned", "migrate", "file://{dir}/src", "--alignment", "{dir}/nanmatrix.vb", "--to",
         "file://{dir}/t", code=ARTIFACT),
    case("alignment-dims-disagree-with-matrix-resigned", "migrate", "file://{dir}/src", "--alignment",
         "{dir}/dims.vb", "--to", "file://{dir}/t", code=ARTIFACT),
    case("alignment-is-a-folder", "migrate", "file://{dir}/src", "--alignment", "{dir}", "--to", "file://{dir}/t",
         code=USAGE),
    case("info-alignment-flipped-byte", "info", "{dir}/flipped.vb", code=ARTIFACT),
    case("merge-alignment-flipped-byte", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t",
         "--alignment", "{dir}/flipped.vb", code=ARTIFACT),
    # --- NaN vectors ------------------------------------------------------------------------------------------------
    case("nan-vector-migrate", "migrate", "file://{dir}/nan", *M, code=INPUT),
    case("nan-vector-fit", "fit", "--source", "file://{dir}/nan", "--target", "file://{dir}/b", "-o", "{dir}/x.vb",
         code=INPUT),
    case("nan-vector-merge", "merge", "file://{dir}/nan", "file://{dir}/b", "--into", "file://{dir}/t",
         "--alignment", "{align}", code=INPUT),
    # --- checkpoint paths -------------------------------------------------------------------------------------------
    case("checkpoint-is-the-alignment", "migrate", "file://{dir}/src", *M, "--checkpoint", "{align}",
         code={USAGE, INPUT}),
    case("checkpoint-is-the-source-manifest", "migrate", "file://{dir}/src", *M, "--checkpoint",
         "{dir}/src/manifest.json", code={USAGE, INPUT}),
    case("checkpoint-inside-the-source", "migrate", "file://{dir}/src", *M, "--checkpoint", "{dir}/src/ck.json",
         code={USAGE, INPUT}),
    case("checkpoint-is-a-folder", "migrate", "file://{dir}/src", *M, "--checkpoint", "{dir}", code=USAGE),
    case("checkpoint-damaged-resume", "migrate", "file://{dir}/src", *M, "--checkpoint", "{dir}/damaged.migrate.json",
         "--resume", code={USAGE, INPUT}),
    case("merge-checkpoint-is-the-alignment", "merge", "file://{dir}/src", "file://{dir}/b", "--into",
         "file://{dir}/t", "--alignment", "{align}", "--checkpoint", "{align}", code={USAGE, INPUT}),
    # --- the target is the source -----------------------------------------------------------------------------------
    case("target-is-source", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to", "file://{dir}/src",
         code=INPUT),
    case("target-is-source-trailing-slash", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to",
         "file://{dir}/src/", code=INPUT),
    case("target-is-source-bare-path", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to", "{dir}/src",
         code=INPUT),
    case("target-is-source-dot-segment", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to",
         "file://{dir}/./src", code=INPUT),
    case("target-is-source-relative", "migrate", "file://{dir}/src", "--alignment", "{align}", "--to",
         "file://./src", code=INPUT),
    case("target-is-source-pgvector-vector-option", "migrate", "{pg}", "--alignment", "{align}", "--to",
         "{pg}&vector=embedding", code=INPUT),
    case("target-is-source-pgvector-localhost", "migrate", "{pg}", "--alignment", "{align}", "--to",
         "{pg_localhost}", code=INPUT),
    case("merge-into-a", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/src/",
         "--alignment", "{align}", code=INPUT),
    case("merge-into-b", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "{dir}/b", "--alignment",
         "{align}", code=INPUT),
    case("field-is-the-source-vector-field", "migrate", "{pg}", "--alignment", "{align}", "--field", "embedding",
         code=INPUT),
    # --- pairs files ------------------------------------------------------------------------------------------------
    case("pairs-binary", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t", "--alignment",
         "{align}", "--pairs", "file:{dir}/binary.json", code=INPUT),
    case("pairs-not-json", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t", "--alignment",
         "{align}", "--pairs", "file:{dir}/notjson.json", code=INPUT),
    case("pairs-json-object", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t",
         "--alignment", "{align}", "--pairs", "file:{dir}/object.json", code=INPUT),
    case("pairs-missing", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t", "--alignment",
         "{align}", "--pairs", "file:{dir}/nope.json", code=INPUT),
    case("fit-pairs-binary", "fit", "--source", "file://{dir}/src", "--target", "file://{dir}/b", "--pairs",
         "file:{dir}/binary.json", "-o", "{dir}/x.vb", code=INPUT),
    # --- file-store collections with bad files ----------------------------------------------------------------------
    case("payload-line-not-an-object", "migrate", "file://{dir}/plain_list_payload", *M, code=INPUT),
    case("payload-invalid-utf8", "migrate", "file://{dir}/plain_bad_utf8", *M, code=INPUT),
    case("ids-file-truncated", "migrate", "file://{dir}/plain_truncated_ids", *M, code=INPUT),
    case("id-is-a-list", "migrate", "file://{dir}/plain_list_id", *M, code=INPUT),
    case("ids-fewer-than-vectors", "migrate", "file://{dir}/plain_short_ids", *M, code=INPUT),
    case("vectors-file-truncated", "migrate", "file://{dir}/plain_truncated_vectors", *M, code={INPUT, STORE}),
    case("segment-payloads-damaged", "migrate", "file://{dir}/damaged_segment", *M, code={INPUT, STORE}),
    # --- numeric options --------------------------------------------------------------------------------------------
    case("batch-size-0", "migrate", "file://{dir}/src", *M, "--batch-size", "0", code=USAGE),
    case("batch-size-negative", "migrate", "file://{dir}/src", *M, "--batch-size", "-5", code=USAGE),
    case("merge-batch-size-0", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t",
         "--alignment", "{align}", "--batch-size", "0", code=USAGE),
    case("fit-max-pairs-0", "fit", "--source", "file://{dir}/src", "--target", "file://{dir}/b", "--max-pairs", "0",
         "-o", "{dir}/x.vb", code=USAGE),
    case("fit-holdout-negative", "fit", "--source", "file://{dir}/src", "--target", "file://{dir}/b", "--holdout",
         "-0.5", "-o", "{dir}/x.vb", code={USAGE, INPUT}),
    case("evaluate-k-0", "evaluate", "--alignment", "{align}", "--source", "file://{dir}/src", "--target",
         "file://{dir}/b", "-k", "0", code=USAGE),
    case("verify-sample-0", "verify", "file://{dir}/src", "file://{dir}/b", "--alignment", "{align}", "--sample", "0",
         code=USAGE),
    case("upgrade-start-fit-sample-0", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--to",
         "file://{dir}/t", "--fit-sample", "0", "--state", "{dir}/n.upgrade.sqlite", code=USAGE),
    case("reembed-batch-size-0", "upgrade", "reembed", "--state", "{dir}/u.upgrade.sqlite", "--batch-size", "0",
         code=USAGE),
    case("reembed-until-above-1", "upgrade", "reembed", "--state", "{dir}/u.upgrade.sqlite", "--until", "1.5",
         code=USAGE),
    case("reembed-limit-negative", "upgrade", "reembed", "--state", "{dir}/u.upgrade.sqlite", "--limit", "-3",
         code=USAGE),
    case("reembed-spend-cap-without-price", "upgrade", "reembed", "--state", "{dir}/u.upgrade.sqlite",
         "--spend-cap", "5", code={USAGE, INPUT}),
    # --- upgrade start: where the new vectors go --------------------------------------------------------------------
    case("upgrade-to-the-source", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--to",
         "file://{dir}/src", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    case("upgrade-to-the-source-other-spelling", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--to",
         "{dir}/./src/", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    case("upgrade-field-is-the-source-vector-field", "upgrade", "start", "{pg}", "--to-model", MODEL, "--field",
         "embedding", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    case("upgrade-neither-to-nor-field", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--state",
         "{dir}/n.upgrade.sqlite", code=USAGE),
    case("upgrade-both-to-and-field", "upgrade", "start", "{pg}", "--to-model", MODEL, "--field", "v2", "--to",
         "{pgnew}", "--state", "{dir}/n.upgrade.sqlite", code=USAGE),
    case("upgrade-text-field-missing", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--to",
         "file://{dir}/t", "--text-field", "nosuch", "--state", "{dir}/n.upgrade.sqlite", code=INPUT),
    case("upgrade-state-in-read-only-folder", "upgrade", "start", "file://{dir}/src", "--to-model", MODEL, "--to",
         "file://{dir}/t", "--state", "{ro}/n.upgrade.sqlite", code={INPUT, STORE}),
    # --- damaged upgrade state files --------------------------------------------------------------------------------
    case("state-flipped-bytes", "upgrade", "status", "--state", "{dir}/flipped.upgrade.sqlite", code={INPUT, ARTIFACT}),
    case("state-meta-not-json", "upgrade", "status", "--state", "{dir}/notjson.upgrade.sqlite",
         code={INPUT, ARTIFACT}),
    case("state-meta-row-deleted", "upgrade", "status", "--state", "{dir}/nometa.upgrade.sqlite",
         code={INPUT, ARTIFACT}),
    case("state-empty-file", "upgrade", "status", "--state", "{dir}/empty.upgrade.sqlite", code={INPUT, ARTIFACT}),
    case("state-text-file", "upgrade", "reembed", "--state", "{dir}/text.upgrade.sqlite", code={INPUT, ARTIFACT}),
    case("state-meta-a-json-list", "upgrade", "cutover", "--state", "{dir}/metalist.upgrade.sqlite",
         code={INPUT, ARTIFACT}),
    case("state-missing", "upgrade", "status", "--state", "{dir}/nope.upgrade.sqlite", code={INPUT, STORE}),
    # --- finalize --drop-old needs a yes ----------------------------------------------------------------------------
    case("finalize-drop-old-without-terminal", "upgrade", "finalize", "--state", "{dir}/u.upgrade.sqlite",
         "--drop-old", code=USAGE),
    # --- usage ------------------------------------------------------------------------------------------------------
    case("migrate-without-to-or-field", "migrate", "file://{dir}/src", "--alignment", "{align}", code=USAGE),
    case("merge-unknown-policy", "merge", "file://{dir}/src", "file://{dir}/b", "--into", "file://{dir}/t",
         "--alignment", "{align}", "--policy", "keep-neither", code=USAGE),
]


# --- the template folder every case copies --------------------------------------------------------------------------
def _resign(src: Path, dst: Path, edit) -> None:
    """Copy an alignment with ``edit(meta, tensors)`` applied and its checksum recomputed, as someone editing the
    file on purpose would: SHA-256 over the sorted metadata without the checksum, then each tensor's name, dtype,
    shape and bytes."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(src), framework="np") as fh:
        meta = json.loads(fh.metadata()["vecbridge"])
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    meta = edit(meta, tensors)
    if isinstance(meta, dict):
        h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
        for name in sorted(tensors):
            arr = np.ascontiguousarray(tensors[name])
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
            h.update(arr.tobytes())
        meta["sha256"] = h.hexdigest()
    save_file(tensors, str(dst), metadata={"vecbridge": json.dumps(meta, sort_keys=True)})


def _artifacts(root: Path, good: Path) -> None:
    data = good.read_bytes()
    (root / "truncated.vb").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) * 3 // 4] ^= 0xFF
    (root / "flipped.vb").write_bytes(bytes(flipped))
    (root / "empty.vb").write_bytes(b"")
    (root / "text.vb").write_text("this is not an alignment\n")
    _resign(good, root / "scale0.vb", lambda m, t: {**m, "scale": 0.0})
    _resign(good, root / "normalization.vb", lambda m, t: {**m, "normalization": "cube-root"})
    _resign(good, root / "metalist.vb", lambda m, t: [m])

    def nan_matrix(m, t):
        t["matrix"] = t["matrix"].copy()
        t["matrix"][0, 0] = np.nan
        return m
    _resign(good, root / "nanmatrix.vb", nan_matrix)
    _resign(good, root / "dims.vb", lambda m, t: {**m, "source_dim": 100})


def _plain(root: Path, name: str, vectors: np.ndarray, ids: bytes, payloads: bytes) -> None:
    """A plain read-only layout: vectors.npy, ids.json, payloads.jsonl."""
    d = root / name
    d.mkdir()
    np.save(d / "vectors.npy", vectors)
    (d / "ids.json").write_bytes(ids)
    (d / "payloads.jsonl").write_bytes(payloads)


def _plain_layouts(root: Path, vectors: np.ndarray, ids: list) -> None:
    good_ids = json.dumps(ids).encode()
    lines = [json.dumps({"n": j}).encode() for j in range(len(ids))]
    _plain(root, "plain_list_payload", vectors, good_ids, b"\n".join(lines[:5] + [b"[1, 2]"] + lines[6:]) + b"\n")
    _plain(root, "plain_bad_utf8", vectors, good_ids,
           b"\n".join(lines[:5] + [b'{"text": "caf\xe9 \xff"}'] + lines[6:]) + b"\n")
    _plain(root, "plain_truncated_ids", vectors, good_ids[: len(good_ids) // 2], b"\n".join(lines) + b"\n")
    _plain(root, "plain_list_id", vectors, json.dumps([["x"]] + ids[1:]).encode(), b"\n".join(lines) + b"\n")
    _plain(root, "plain_short_ids", vectors, json.dumps(ids[:-3]).encode(), b"\n".join(lines) + b"\n")
    _plain(root, "plain_truncated_vectors", vectors, good_ids, b"\n".join(lines) + b"\n")
    npy = root / "plain_truncated_vectors" / "vectors.npy"
    npy.write_bytes(npy.read_bytes()[: npy.stat().st_size // 2])


def _upgrade(root: Path, sample) -> None:
    """An upgrade of ``usrc`` (relative URLs: each case's copy is its own) cut over with every record native, and
    damaged copies of its state file."""
    from vecbridge.jobs.upgrade import open_upgrade, start

    here = os.getcwd()
    os.chdir(root)
    try:
        write("file://./usrc", *old_records(sample, 0, 60))
        start("file://./usrc", model=MODEL, text_field="text", to="file://./unew", state_path="u.upgrade.sqlite",
              fit_sample=40)
        with open_upgrade("u.upgrade.sqlite") as up:
            up.reembed(batch_size=32)
            up.cutover()
    finally:
        os.chdir(here)
    state = root / "u.upgrade.sqlite"
    data = bytearray(state.read_bytes())
    for k in range(200, len(data), 97):
        data[k] ^= 0x5A
    (root / "flipped.upgrade.sqlite").write_bytes(bytes(data))
    for name, sql, args in [("notjson", "UPDATE meta SET doc = ?", ("{oops",)),
                            ("nometa", "DELETE FROM meta", ()),
                            ("metalist", "UPDATE meta SET doc = ?", ("[1, 2, 3]",))]:
        path = root / f"{name}.upgrade.sqlite"
        shutil.copy(state, path)
        db = sqlite3.connect(path)
        with db:
            db.execute(sql, args)
        db.close()
    (root / "empty.upgrade.sqlite").write_bytes(b"")
    (root / "text.upgrade.sqlite").write_text("not a database\n")


@pytest.fixture(scope="session")
def template(scratch, sample, alignment_file) -> Path:
    root = scratch / "bad-inputs-template"
    root.mkdir()
    n = 50
    ids, old, payloads = old_records(sample, 0, n)
    write(f"file://{root}/src", ids, old, payloads)
    write(f"file://{root}/src2", ids, old, payloads)
    write(f"file://{root}/b", ids, sample.docs_new[:n], [{"b": j} for j in range(n)])
    write(f"file://{root}/wrong_dim", ids, sample.docs_new[:n], payloads)
    write(f"file://{root}/damaged_segment", ids, old, payloads)
    for segment in (root / "damaged_segment" / "segments").glob("*.meta.npz"):
        segment.write_bytes(segment.read_bytes()[:40] + b"\x00garbage" * 8)
    (root / "damaged.migrate.json").write_text('{"version": 1, "identity": ')
    connect(f"file://{root}/empty").create(dim=old.shape[1])
    write(f"file://{root}/nan", ids, old, payloads)
    for segment in (root / "nan" / "segments").glob("*.npy"):   # the store refuses to write one: put it there
        vectors = np.load(segment)
        vectors[7, 3] = np.nan
        np.save(segment, vectors)
    shutil.copy(alignment_file, root / "a.vb")
    _artifacts(root, alignment_file)
    _plain_layouts(root, old, list(ids))
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "notjson.json").write_text('{"a": [1, 2')
    (root / "object.json").write_text(json.dumps({"a": "b"}))
    _upgrade(root, sample)
    return root


@pytest.fixture(scope="session")
def pg_source(pg_engine, sample):
    """A PostgreSQL+pgvector source table (old model) and its rows."""
    url = write(pg_engine.url("bad_src"), *old_records(sample, 0, 50))
    return url, snapshot(url)


@pytest.fixture(scope="session")
def read_only_folder(tmp_path_factory):
    """A folder nothing can be created in, root included (``chattr +i``; on disk: memory file systems have no such
    attribute)."""
    path = tmp_path_factory.mktemp("read_only")
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("cannot make a folder read-only for root here (chattr +i refused)")
        yield path
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


def _files(root: Path) -> dict:
    """Every file and folder under ``root``: path -> SHA-256 of its bytes (None for a folder)."""
    out = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = None if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _error_lines(stderr: str) -> list[str]:
    """The error lines of stderr: click's usage preamble and warnings left out."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return [ln for ln in lines if not ln.startswith(("Usage:", "Try '", "warning:"))]


@pytest.mark.parametrize("args, codes", CASES)
def test_bad_input(args, codes, request, template, work, monkeypatch):
    case_dir = work / "case"
    shutil.copytree(template, case_dir, symlinks=True)
    monkeypatch.chdir(case_dir)
    monkeypatch.delenv("VECBRIDGE_DEBUG", raising=False)
    line = " ".join(args)
    fill = {"dir": str(case_dir), "align": str(case_dir / "a.vb")}
    pg = None
    if "{pg" in line:
        url, rows = request.getfixturevalue("pg_source")
        new = url.rsplit("table=", 1)[0] + f"table=bad_new_{work.name[-8:].lower()}"
        host = url.split("?", 1)[0]
        fill.update(pg=url, pgnew=new, pghost=host, pg_localhost=url.replace("127.0.0.1", "localhost"))
        pg = (url, rows, new)
    if "{ro}" in line:
        fill["ro"] = str(request.getfixturevalue("read_only_folder"))
    argv = [a.format(**fill) for a in args]
    before = _files(case_dir)

    result = CliRunner().invoke(main, argv, catch_exceptions=False)

    out = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stdout + result.stderr, out
    assert result.exit_code in codes, f"expected exit {sorted(codes)}: {out}"
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and errors[0].lower().startswith("error:"), f"not one error line: {out}"
    assert "secret" not in result.stderr, "a password in the message"
    assert _files(case_dir) == before, f"something was written or changed under the case folder: {out}"
    if pg is not None:
        url, rows, new = pg
        assert snapshot(url) == rows, "the PostgreSQL source changed"
        assert not connect(new).exists(), "a PostgreSQL table was created"
        columns = connect(url, read_only=True).info().vector_fields
        assert set(columns) == {"embedding"}, f"the PostgreSQL source gained vector columns: {columns}"
    if "{ro}" in line:
        assert not any(Path(fill["ro"]).iterdir()), "a file appeared in the read-only folder"
