"""A source is never dropped or written, whatever the spelling of the target URL.

Every engine is given its source collection's URL spelled other ways (relative paths, query forms, another vector
field, another name for the host) as the target of ``migrate --overwrite`` and as ``merge --into --overwrite``
with the source as either input; each run must be refused with a usage-data error (exit 3) and the source must
hold exactly what it held before.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect


def _aliases(engine_name: str, url: str, workdir: Path) -> list[str]:
    """Other spellings of ``url`` (a fresh collection's URL on the engine); relative ones are relative to
    ``workdir``, where the test runs."""
    if engine_name == "file":
        path = Path(url[len("file://"):])
        link = workdir / "link_to_src"
        link.symlink_to(path, target_is_directory=True)
        rel = os.path.relpath(path, workdir)
        return [f"file://./{rel}", f"file://{path}/", f"{path}", f"file://{path.parent}//{path.name}",
                f"file://{path.parent}/./{path.name}", f"file://{path.parent}/../{path.parent.name}/{path.name}",
                f"file://{link}", f"file://{path.parent}/{path.name[:-1]}%{ord(path.name[-1]):02X}"]
    if engine_name == "milvus_lite":
        db, name = url[len("milvus://"):].rsplit("/", 1)
        rel = os.path.relpath(db, workdir)
        return [f"milvus://{db}?collection={name}", f"milvus://./{rel}/{name}", f"milvus://{db}/{name}?vector=other",
                f"milvus://{db}/{name}/"]
    if engine_name == "milvus_server":
        return [url.replace("127.0.0.1", "localhost"), url + "?vector=other", url + "?timeout=30"]
    if engine_name == "qdrant_local":   # the in-memory engine; the directory form is tested below
        return [url + "?vector=other", url + "?timeout=30"]
    if engine_name == "qdrant_edge":
        path = Path(url[len("qdrant-edge://"):])
        return [f"qdrant-edge://./{os.path.relpath(path, workdir)}", f"qdrant-edge://{path}?vector=other",
                f"qdrant-edge://{path.parent}/./{path.name}"]
    if engine_name == "pgvector":
        base, table = url.split("?table=")
        return [f"{base}?table={table}&vector=emb2", f"{base}?table=public.{table}",
                f"{base.replace('127.0.0.1', 'localhost')}?table={table}", f"{base}?id=id&table={table}",
                f"{base}?table={table}&payload=payload&vector=embedding"]
    if engine_name == "chroma_persistent":
        path = Path(url[len("chroma://"):])
        return [f"chroma://{path.parent}?collection={path.name}",
                f"chroma://./{os.path.relpath(path, workdir)}", f"chroma://{path.parent}/./{path.name}"]
    if engine_name == "chroma_server":
        return [url.replace("127.0.0.1", "localhost"),
                url.rsplit("/", 1)[0] + "?collection=" + url.rsplit("/", 1)[1]]
    raise AssertionError(f"no alias spellings for engine {engine_name}")


def _snapshot(url: str) -> dict:
    return {i: (v.tobytes(), p) for b in connect(url).scan(500) for i, v, p in zip(b.ids, b.vectors, b.payloads)}


@pytest.fixture
def pieces(tmp_path, sample):
    """A 384 -> 768 alignment, and a 768-d B collection for merges (on the file store)."""
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old, sample.docs_new)).save(
        tmp_path / "a.vb")
    b = connect(f"file://{tmp_path}/b").create(dim=768)
    b.upsert(VectorBatch([f"b{i}" for i in range(50)], sample.docs_new[:50]))
    return align, b.url


def _refused(runner: CliRunner, args: list[str]) -> str:
    result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 3, (args, result.exit_code, result.output)
    assert "refusing to write into" in result.output and "Traceback" not in result.output
    return result.output


def _check_aliases(engine_name: str, url: str, workdir: Path, pieces, monkeypatch) -> int:
    align, b_url = pieces
    before = _snapshot(url)
    assert len(before) == 200
    monkeypatch.chdir(workdir)
    runner = CliRunner()
    aliases = _aliases(engine_name, url, workdir)
    for alias in [url] + aliases:
        assert connect(alias).identity == connect(url).identity, alias
        _refused(runner, ["migrate", url, "--alignment", align, "--to", alias, "--overwrite"])
        _refused(runner, ["migrate", alias, "--alignment", align, "--to", url, "--overwrite"])
        _refused(runner, ["merge", url, b_url, "--into", alias, "--alignment", align, "--overwrite"])
        assert _snapshot(url) == before, f"source changed after a run with target {alias}"
    return len(aliases)


def test_no_spelling_of_the_source_can_be_overwritten(engine, new_url, sample, pieces, tmp_path, monkeypatch):
    url = new_url("src")
    src = connect(url).create(dim=384)
    src.upsert(VectorBatch([f"d{i}" for i in range(200)], sample.docs_old[:200],
                           [{"text": it["doc"]} for it in sample.items[:200]]))
    assert _check_aliases(engine.name, url, tmp_path, pieces, monkeypatch) >= 2


def test_merge_never_overwrites_input_b(tmp_path, sample, pieces, monkeypatch):
    align, b_url = pieces
    a = connect(f"file://{tmp_path}/a").create(dim=384)
    a.upsert(VectorBatch([f"a{i}" for i in range(20)], sample.docs_old[:20]))
    before = _snapshot(b_url)
    monkeypatch.chdir(tmp_path)
    for alias in ("file://./b", f"{tmp_path}/b/", f"file://{tmp_path}//b"):
        _refused(CliRunner(), ["merge", a.url, b_url, "--into", alias, "--alignment", align, "--overwrite"])
    assert _snapshot(b_url) == before


def test_qdrant_directory_spellings(tmp_path, sample, pieces, monkeypatch):
    pytest.importorskip("qdrant_client")
    url = f"qdrant://{tmp_path}/q/docs"
    src = connect(url).create(dim=384)
    src.upsert(VectorBatch([f"d{i}" for i in range(200)], sample.docs_old[:200]))
    monkeypatch.chdir(tmp_path)
    for alias in (f"{url}?vector=other", "qdrant://./q/docs", f"qdrant://{tmp_path}/./q/docs"):
        assert connect(alias).identity == src.identity, alias
    before = _snapshot(url)
    runner = CliRunner()
    for alias in (f"{url}?vector=other", "qdrant://./q/docs", f"qdrant://{tmp_path}/./q/docs"):
        _refused(runner, ["migrate", url, "--alignment", pieces[0], "--to", alias, "--overwrite"])
        _refused(runner, ["merge", url, pieces[1], "--into", alias, "--alignment", pieces[0], "--overwrite"])
    assert _snapshot(url) == before


def test_field_may_not_name_the_source_vectors(engine, new_url, sample, pieces):
    """``--field`` writes beside the source vectors, never over them."""
    url = new_url("fld")
    src = connect(url).create(dim=384)
    if src.vector_field is None:
        pytest.skip(f"{engine.name} URLs do not name their vector field")
    src.upsert(VectorBatch([f"d{i}" for i in range(50)], sample.docs_old[:50]))
    before = _snapshot(url)
    result = CliRunner().invoke(main, ["migrate", url, "--alignment", str(pieces[0]), "--field", src.vector_field])
    assert result.exit_code == 3 and "holds the source vectors" in result.output, result.output
    assert _snapshot(url) == before


def test_different_collections_are_different(tmp_path):
    """The guard must not refuse what is really another collection."""
    pairs = [("file:///data/a", "file:///data/b"), ("milvus:///d/x.db/a", "milvus:///d/x.db/b"),
             ("milvus:///d/x.db/a", "milvus:///d/y.db/a"), ("qdrant:///d/q/a", "qdrant:///d/q/b"),
             # schema-qualified: an unqualified table's schema is the server's answer (see test_pgvector_inplace.py)
             ("postgresql://u@h1/db?table=public.t", "postgresql://u@h1/db2?table=public.t"),
             ("postgresql://u@h1/db?table=public.t", "postgresql://u@h1/db?table=other.t"),
             ("postgresql://u@127.0.0.1:5432/db?table=public.t", "postgresql://u@127.0.0.1:5433/db?table=public.t"),
             ("chroma:///d/c/a", "chroma:///d/c/b"), ("chroma:///d/c/a", "chroma:///d/c/a?database=other")]
    for a, b in pairs:
        try:
            ia, ib = connect(a).identity, connect(b).identity
        except Exception as exc:   # a store whose client is not installed
            pytest.skip(str(exc))
        assert ia != ib, (a, b)
