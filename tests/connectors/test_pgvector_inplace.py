"""In-place writes into an application's own PostgreSQL table, and the identity of an unqualified table.

The table is hand-made, as applications make them (``content text NOT NULL`` beside the vectors), or made by
vecbridge: ``migrate --field``, ``upgrade start --field`` and ``upgrade reembed`` update its rows and never insert,
so rows deleted during the write stay deleted; an interrupted write resumes or starts over. A keep-both merge, whose
second field is written the same way, still fills it. A role with its own schema names one table two ways (``docs``
and ``bob.docs``), and neither spelling may be dropped as the other's target.
"""
from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from pgvector.psycopg import register_vector

from tests.embedders import mpnet_lookup
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.pgvector import PgVectorCollection
from vecbridge.errors import StoreError
from vecbridge.jobs.merge import A_FIELD, merge
from vecbridge.jobs.rewrite import migrate
from vecbridge.jobs.upgrade import Upgrade

N = 300
MODEL = "tests.embedders:mpnet_lookup"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def alignment(sample, tmp_path_factory):
    """A 384 -> 768 map (MiniLM -> MPNet) of the sample."""
    est = OrthogonalProcrustes().fit(sample.docs_old, sample.docs_new)
    return Alignment.from_estimator(est).save(tmp_path_factory.mktemp("inplace") / "a.vb")


def _sql(pg_engine, *statements) -> list:
    """Run statements on the test server; the rows of the last one, if it returns any."""
    with psycopg.connect(pg_engine.server.dsn(), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_type WHERE typname = 'vector'").fetchone():
            register_vector(conn)
        rows = []
        for s in statements:
            cur = conn.execute(*s) if isinstance(s, tuple) else conn.execute(s)
            rows = cur.fetchall() if cur.description else []
        return rows


def _fill(pg_engine, table: str, sample, hand_made: bool) -> str:
    """N sample records in a new table: hand-made ``(id text PRIMARY KEY, content text NOT NULL, embedding
    vector(384))``, or made by vecbridge (``id, payload jsonb, embedding``, every column nullable)."""
    url = pg_engine.url(table)
    if not hand_made:
        connect(url).create(dim=384).upsert(VectorBatch(sample.ids[:N], sample.docs_old[:N],
                                                        [{"content": it["doc"]} for it in sample.items[:N]]))
        return url
    _sql(pg_engine, "CREATE EXTENSION IF NOT EXISTS vector",
         f"CREATE TABLE {table} (id text PRIMARY KEY, content text NOT NULL, embedding vector(384))")
    with psycopg.connect(pg_engine.server.dsn(), autocommit=True) as conn:
        register_vector(conn)
        with conn.cursor() as cur, cur.copy(f"COPY {table} (id, content, embedding) FROM STDIN") as cp:
            for i in range(N):
                cp.write_row((sample.ids[i], sample.items[i]["doc"], sample.docs_old[i]))
    return url


@pytest.fixture
def docs(pg_engine, sample):
    """The URL of a hand-made table of N sample texts, dropped after the test."""
    table = f"docs_{uuid.uuid4().hex[:10]}"
    yield _fill(pg_engine, table, sample, hand_made=True)
    _sql(pg_engine, f"DROP TABLE IF EXISTS {table} CASCADE")


@pytest.fixture(params=["hand-made", "vecbridge"])
def any_docs(pg_engine, sample, request):
    """As ``docs``, and also a table vecbridge made (nothing there would stop an insert)."""
    table = f"docs_{uuid.uuid4().hex[:10]}"
    yield _fill(pg_engine, table, sample, hand_made=request.param == "hand-made")
    _sql(pg_engine, f"DROP TABLE IF EXISTS {table} CASCADE")


def _table(url: str) -> str:
    return url.rsplit("table=", 1)[1]


def _rows(pg_engine, url: str, column: str) -> dict:
    """``id -> (original vector, column's vector or None)`` of every row."""
    rows = _sql(pg_engine, f"SELECT id, embedding, {column} FROM {_table(url)}")
    return {i: tuple(None if v is None else v.to_numpy() for v in vs) for i, *vs in rows}


def _check_filled(pg_engine, url: str, sample, alignment, column: str = "emb_new", n: int = N):
    """Every one of the n rows is there, its content and old vector as written, its new vector the mapped one."""
    got = _rows(pg_engine, url, column)
    assert sorted(got) == sorted(sample.ids[:n])
    assert dict(_sql(pg_engine, f"SELECT id, content FROM {_table(url)}")) == {
        sample.ids[j]: sample.items[j]["doc"] for j in range(n)}
    mapped = Alignment.load(alignment).transform(sample.docs_old[:n])
    for j in range(n):
        old, new = got[sample.ids[j]]
        np.testing.assert_array_equal(old, sample.docs_old[j].astype(np.float32))
        assert new is not None, f"{sample.ids[j]} has no {column}"
        np.testing.assert_allclose(new, mapped[j], atol=1e-5)


def test_field_migrate_updates_a_table_with_a_not_null_column(pg_engine, docs, sample, alignment, tmp_path):
    r = run("migrate", docs, "--alignment", alignment, "--field", "emb_new", "--batch-size", 64,
            "--checkpoint", tmp_path / "c.json")
    assert r.exit_code == 0, r.output
    _check_filled(pg_engine, docs, sample, alignment)
    assert connect(docs + "&vector=emb_new").info().count == N


class _Interrupted(Exception):
    pass


def _interrupt_after(monkeypatch, n_batches: int):
    """In-place writes fail like a lost connection after ``n_batches`` batches."""
    real, calls = PgVectorCollection.upsert, []

    def upsert(self, batch):
        if self.updates_only:
            calls.append(len(batch))
            if len(calls) > n_batches:
                raise _Interrupted("connection lost")
        return real(self, batch)

    monkeypatch.setattr(PgVectorCollection, "upsert", upsert)


def test_interrupted_field_migrate_resumes_and_overwrites(pg_engine, docs, sample, alignment, tmp_path, monkeypatch):
    ckpt = tmp_path / "c.json"
    args = ["migrate", docs, "--alignment", alignment, "--field", "emb_new", "--checkpoint", ckpt]
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        with pytest.raises(_Interrupted):
            migrate(docs, alignment, field="emb_new", batch_size=50, checkpoint_path=ckpt)
    assert connect(docs + "&vector=emb_new").info().count == 100 and ckpt.exists()
    r = run(*args)
    assert r.exit_code == 3 and "--resume" in r.output, r.output
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    _check_filled(pg_engine, docs, sample, alignment)

    # --overwrite replaces the column this run added: after a completed run (no checkpoint left) ...
    _sql(pg_engine, f"UPDATE {_table(docs)} SET emb_new = NULL WHERE id = '{sample.ids[5]}'")
    r = run(*args, "--overwrite")
    assert r.exit_code == 0, r.output
    _check_filled(pg_engine, docs, sample, alignment)
    # ... and after an interrupted one
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        with pytest.raises(_Interrupted):
            migrate(docs, alignment, field="emb_new", batch_size=50, checkpoint_path=ckpt, overwrite=True)
    assert connect(docs + "&vector=emb_new").info().count == 50
    r = run(*args, "--overwrite")
    assert r.exit_code == 0, r.output
    _check_filled(pg_engine, docs, sample, alignment)

    # never the source's own vector column
    r = run("migrate", docs, "--alignment", alignment, "--field", "embedding", "--overwrite", "--checkpoint", ckpt)
    assert r.exit_code == 3 and "holds the source vectors" in r.output, r.output
    _check_filled(pg_engine, docs, sample, alignment)


def test_a_field_view_updates_only_rows_that_exist(pg_engine, any_docs, sample):
    """A batch written after some of its rows were deleted updates the others and brings none back."""
    docs = any_docs
    src = connect(docs)
    src.add_vector_field("emb_new", dim=8)
    view = src.with_vector_field("emb_new")
    rng = np.random.default_rng(0)
    first, second = sample.ids[:100], sample.ids[100:200]
    assert view.upsert(VectorBatch(first, rng.normal(size=(100, 8)))) == 100
    gone = second[::3]
    assert src.delete(gone) == len(gone)
    updated = view.upsert(VectorBatch(second, rng.normal(size=(100, 8))))
    never = view.upsert(VectorBatch(["never-there"], rng.normal(size=(1, 8))))
    held = _rows(pg_engine, docs, "emb_new")
    assert len(held) == N - len(gone) and not set(gone) & set(held) and "never-there" not in held
    assert (updated, never) == (100 - len(gone), 0)   # what the writes report: the rows they updated
    assert view.info().count == 200 - len(gone)


def test_rows_deleted_during_a_field_migrate_stay_deleted(pg_engine, any_docs, sample, alignment, tmp_path):
    """The application deletes rows after the migration read them and before it writes them."""
    docs = any_docs
    gone = sample.ids[120:130] + [sample.ids[299]]

    class DeletingScan(PgVectorCollection):
        def scan(self, batch_size=1000, after=None, until=None):
            for batch in super().scan(batch_size, after, until):
                doomed = [i for i in batch.ids if i in gone]
                if doomed:
                    connect(self.url).delete(doomed)
                yield batch

    result = migrate(DeletingScan(docs, read_only=True), alignment, field="emb_new", batch_size=50,
                     checkpoint_path=tmp_path / "c.json")
    assert result["read"] == N
    held = _rows(pg_engine, docs, "emb_new")
    assert len(held) == N - len(gone) and not set(gone) & set(held)
    assert all(new is not None for _, new in held.values())


def test_upgrade_in_place_leaves_deleted_rows_deleted(pg_engine, any_docs, sample, tmp_path):
    """``upgrade start --field`` maps every row in place (a ``NOT NULL`` column is no obstacle); rows the application
    deletes while ``reembed`` runs are not brought back, so the serving view never shows them after the cutover."""
    docs = any_docs
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "start", docs, "--field", "emb_new", "--to-model", MODEL, "--text-field", "content",
            "--state", state, "--fit-sample", 200)
    assert r.exit_code == 0, r.output
    held = _rows(pg_engine, docs, "emb_new")
    assert len(held) == N and all(new is not None for _, new in held.values())

    id_of = {it["doc"]: i for i, it in zip(sample.ids, sample.items)}
    gone: list = []

    def deleting_model(texts):   # the application deletes records whose new vectors are being computed
        if not gone:
            gone.extend(id_of[t] for t in texts[:10])
            connect(docs).delete(gone)
        return mpnet_lookup(texts)

    with Upgrade.open(state) as up:
        up._model = deleting_model
        up.reembed(batch_size=50)
        up.cutover()
    assert len(gone) == 10
    served = {i for (i,) in _sql(pg_engine, f"SELECT id FROM {_table(docs)}_serving")}
    assert len(served) == N - len(gone) and not set(gone) & served
    assert len(_rows(pg_engine, docs, "emb_new")) == N - len(gone)


@pytest.mark.parametrize("links", ["ids", "file"])
def test_keep_both_merge_fills_the_second_field_of_the_merged_records(pg_engine, sample, alignment, tmp_path, links):
    """The second field is written in place too, so a merge writes it once phase B has made the merged records."""
    tag = uuid.uuid4().hex[:8]
    a_ids = sample.ids[:300] if links == "ids" else [f"a{j}" for j in range(300)]
    a = connect(pg_engine.url(f"a_{tag}")).create(dim=384)
    a.upsert(VectorBatch(a_ids, sample.docs_old[:300], [{"from": "a"}] * 300))
    b = connect(pg_engine.url(f"b_{tag}")).create(dim=768)
    b.upsert(VectorBatch(sample.ids[200:500], sample.docs_new[200:500]))
    spec = "ids"
    if links == "file":
        spec = f"file:{tmp_path / 'links.csv'}"
        (tmp_path / "links.csv").write_text("".join(f"a{j},{sample.ids[j]}\n" for j in range(200, 300)))
    into = pg_engine.url(f"c_{tag}")
    out = merge(a.url, b.url, into, alignment, links=spec, policy="keep-both", batch_size=64,
                checkpoint_path=tmp_path / "m.json")
    assert (out["linked"], out["count"]) == (100, 500)
    second = connect(into).with_vector_field(A_FIELD).get(sample.ids[:500])
    assert second.ids == sample.ids[200:300]
    np.testing.assert_allclose(second.vectors, Alignment.load(alignment).transform(sample.docs_old[200:300]),
                               atol=1e-5)
    np.testing.assert_array_equal(connect(into).get(sample.ids[200:300]).vectors,
                                  sample.docs_new[200:300].astype(np.float32))
    for url in (a.url, b.url, into):
        connect(url).drop()


@pytest.fixture
def role(pg_engine):
    """A login role with its own schema (search_path "$user", public: its unqualified tables live there)."""
    name = f"bob_{uuid.uuid4().hex[:8]}"
    _sql(pg_engine, "CREATE EXTENSION IF NOT EXISTS vector", f"CREATE ROLE {name} LOGIN",
         f"CREATE SCHEMA {name} AUTHORIZATION {name}")
    yield name
    _sql(pg_engine, f"DROP OWNED BY {name} CASCADE", f"DROP ROLE {name}")


def test_an_unqualified_table_is_the_one_the_search_path_finds(pg_engine, role, sample, alignment, tmp_path):
    base = pg_engine.server.dsn().replace("postgres@", f"{role}@", 1)
    plain, qualified, public = f"{base}?table=docs", f"{base}?table={role}.docs", f"{base}?table=public.docs"
    src = connect(plain).create(dim=384)
    src.upsert(VectorBatch(sample.ids[:50], sample.docs_old[:50], [{"text": it["doc"]} for it in sample.items[:50]]))
    assert _sql(pg_engine, f"SELECT count(*) FROM {role}.docs") == [(50,)]
    assert connect(plain).identity == connect(qualified).identity != connect(public).identity
    assert connect(plain).identity.name == f"{role}.docs"
    shared = f"shared_{role}"      # a table only public holds is the one the name finds there
    _sql(pg_engine, f"CREATE TABLE public.{shared} (id text PRIMARY KEY)")
    assert connect(f"{base}?table={shared}").identity == connect(f"{base}?table=public.{shared}").identity
    _sql(pg_engine, f"DROP TABLE public.{shared}")

    b = connect(f"file://{tmp_path}/b").create(dim=768)
    b.upsert(VectorBatch([f"b{i}" for i in range(20)], sample.docs_new[:20]))
    for source, target in ((plain, qualified), (qualified, plain)):
        for args in (["migrate", source, "--alignment", alignment, "--to", target, "--overwrite"],
                     ["merge", source, b.url, "--into", target, "--alignment", alignment, "--overwrite"]):
            r = run(*args, "--checkpoint", tmp_path / "c.json")
            assert r.exit_code == 3 and "refusing to write into" in r.output, (args, r.output)
            assert len(r.output.strip().splitlines()) == 1, r.output
            assert connect(plain).info().count == 50


def test_the_schema_of_an_unqualified_table_is_never_guessed():
    """Without the server there is no search_path to resolve: a one-line store error, not an assumed ``public``."""
    from tests.connectors.engines.pgvector import free_port

    port = free_port()
    with pytest.raises(StoreError, match="cannot connect") as err:
        connect(f"postgresql://u:pw-secret@127.0.0.1:{port}/db?table=t").identity
    assert "\n" not in str(err.value) and "pw-secret" not in str(err.value)
    assert connect(f"postgresql://u@127.0.0.1:{port}/db?table=s.t").identity.name == "s.t"   # qualified: no server
