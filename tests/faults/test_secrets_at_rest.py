"""No credential given to vecbridge is ever written down or printed.

For every URL form of every store that carries a credential (``user:password@``, a password that needs
percent-encoding, ``?password=``, ``?api_key=``, and the environment's ``PGPASSWORD``, ``MILVUS_TOKEN`` as
``user:password`` or as an API key, ``QDRANT_API_KEY``, ``CHROMA_TOKEN``), the commands that write things down run
through the CLI on real stores: fit, migrate, verify, report with its HTML, drift run and history, search, upgrade
start and status, info (with ``--json`` and without), and commands that fail: a server that is not there, an extra
argument, a ``--wrap`` without its alignment, a password with an unencoded ``/``. Then every file the run left
(alignments, state files, checkpoints, reports, drift histories, the local stores' own files, and at the end the
servers' data and logs) and everything it printed (stdout, stderr, log records) is searched for the secrets.

PostgreSQL runs with trust authentication and the Milvus and Chroma servers without authentication: each accepts
any credential, so the commands succeed with one; Qdrant's local mode takes (and ignores) an API key. A URL form
carries its secret into every command; an environment form only reaches the connections, so those run the
commands that connect, read, write an alignment and fail.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main

STEM = uuid.uuid4().hex[:10]
PASSWORD = f"pw-S3CR3T-{STEM}"
ODD_PASSWORD = f"pw-S3CR3T-{STEM}!/@:&=%"     # needs percent-encoding in a URL
API_KEY = f"sk-TEST-{STEM}"
#: what no byte written or printed may contain: the stems every secret above starts with
NEEDLES = (f"S3CR3T-{STEM}".encode(), f"TEST-{STEM}".encode())
N = 200
MODEL = "tests.embedders:mpnet_lookup"
#: every directory a server or a local store of this module writes (data, logs), searched once at the end
SERVER_DIRS: list[Path] = []

#: (store, form, environment): every credential-carrying form of every store this machine runs
FORMS = [("pgvector", "userinfo", {}), ("pgvector", "percent-encoded", {}), ("pgvector", "query", {}),
         ("pgvector", "env", {"PGPASSWORD": PASSWORD}),
         ("milvus", "userinfo", {}), ("milvus", "env", {"MILVUS_TOKEN": f"root:{PASSWORD}"}),
         ("milvus", "env", {"MILVUS_TOKEN": API_KEY}),
         ("qdrant", "query", {}), ("qdrant", "env", {"QDRANT_API_KEY": API_KEY}),
         ("chroma", "env", {"CHROMA_TOKEN": API_KEY})]


def _free_port() -> int:
    from tests.connectors.engines.pgvector import free_port

    return free_port()


class Store:
    """One real store of the module: its old (MiniLM, with texts) and new (MPNet) collections of the same records,
    made once, and the URL of any collection spelt in any form."""

    def __init__(self, kind: str, engine=None, root: Path | None = None):
        self.kind, self.engine, self.root = kind, engine, root

    def url(self, name: str, form: str = "plain", port: int | None = None) -> str:
        if self.kind == "qdrant":
            where = f"127.0.0.1:{port}" if port else str(self.root)
            return f"qdrant://{where}/{name}" + (f"?api_key={API_KEY}" if form == "query" or port else "")
        port = port or self.engine.server.port
        if self.kind == "chroma":
            return f"chroma://127.0.0.1:{port}/{name}"
        if self.kind == "milvus":
            user = {"userinfo": f"root:{PASSWORD}@", "unencoded": f"root:{PASSWORD}/x@"}.get(form, "")
            return f"milvus://{user}127.0.0.1:{port}/{name}"
        user = {"userinfo": f"postgres:{PASSWORD}@", "percent-encoded": f"postgres:{quote(ODD_PASSWORD, safe='')}@",
                "unencoded": f"postgres:{PASSWORD}/x@"}.get(form, "postgres@")
        return f"postgresql://{user}127.0.0.1:{port}/postgres?table={name}" + (
            f"&password={PASSWORD}" if form == "query" else "")


@pytest.fixture(scope="module")
def stores(request, sample, tmp_path_factory):
    """``store(kind)``: the :class:`Store` of that kind, started and filled on first use."""
    made: dict[str, Store] = {}

    def store(kind: str) -> Store:
        if kind not in made:
            if kind == "qdrant":
                s = Store(kind, root=tmp_path_factory.mktemp("qdrant_local"))
                SERVER_DIRS.append(s.root)
            else:
                engine = request.getfixturevalue({"pgvector": "pg_engine", "milvus": "milvus_engine",
                                                  "chroma": "chroma_engine"}[kind])
                s = Store(kind, engine)
                SERVER_DIRS.append({"pgvector": lambda: engine.server.base, "milvus": lambda: engine.server.workdir,
                                    "chroma": lambda: engine.server.data.parent}[kind]())
            texts = [{"text": it["doc"]} for it in sample.items[:N]]
            write_collection(s.url(f"old_{STEM}"), sample.ids[:N], sample.docs_old[:N], texts)
            write_collection(s.url(f"new_{STEM}"), sample.ids[:N], sample.docs_new[:N])
            made[kind] = s
        return made[kind]

    return store


def _leaks(data: bytes) -> list[str]:
    return [n.decode() for n in NEEDLES if n in data]


def _files_with_secrets(*roots: Path, skip=("bin",)) -> list[str]:
    """Every file under ``roots`` holding a secret (``skip``: folders of programs, not data)."""
    found = []
    for root in roots:
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink() and not set(path.relative_to(root).parts) & set(skip):
                try:
                    if _leaks(path.read_bytes()):
                        found.append(str(path))
                except OSError:
                    continue
    return found


class Printed:
    """The CLI run in this process, keeping each command's stdout and stderr."""

    def __init__(self):
        self.runs: list[tuple[str, str]] = []

    def __call__(self, *args, code: int | None = 0):
        args = [str(a) for a in args]
        r = CliRunner().invoke(main, args)
        self.runs.append((f"command {len(self.runs) + 1}: {args[0]}", r.stdout + r.stderr))
        assert "Traceback" not in r.output and "internal error" not in r.output, r.output
        assert code is None or r.exit_code == code, (self.runs[-1][0], r.exit_code, r.output)
        return r

    def leaks(self, *captured: str) -> list:
        texts = self.runs + [("captured output and logs", t) for t in captured]
        return [(what, _leaks(out.encode())) for what, out in texts if _leaks(out.encode())]


@pytest.mark.parametrize("kind,form,env", FORMS, ids=[f"{s}-{f}-{'+'.join(e) or 'url'}" for s, f, e in FORMS])
def test_no_secret_is_written_or_printed(stores, kind, form, env, sample, tmp_path, monkeypatch, capfd, caplog):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    work, inputs = tmp_path / "work", tmp_path / "inputs"   # what the commands write; what the user gave them
    work.mkdir()
    inputs.mkdir()
    monkeypatch.chdir(work)
    store = stores(kind)
    tag = uuid.uuid4().hex[:6]
    old, new = store.url(f"old_{STEM}", form), store.url(f"new_{STEM}", form)
    np.save(inputs / "q.npy", sample.queries_new[:5])
    as_json = ["--json"] if FORMS.index((kind, form, env)) % 2 else []   # both renderings, over the forms
    run = Printed()

    run("info", old, *as_json)
    run("fit", "--source", old, "--target", new, "--pairs", "ids", "-o", "align.vb", *as_json)
    run("info", "align.vb", "--json")
    run("search", "--wrap", f"{old}=align.vb", "--native", new, "--vectors", inputs / "q.npy", "-k", 3, *as_json)
    if form != "env":   # the commands that keep a URL somewhere
        mapped = store.url(f"mapped_{tag}", form)
        run("link", old, new, "--pairs", "ids", "-o", "links.json", *as_json)
        run("migrate", old, "--alignment", "align.vb", "--to", mapped, *as_json)
        run("verify", old, mapped, "--alignment", "align.vb", *as_json)
        run("report", old, new, "--pairs", "ids", "--sample", N, "--no-unsupervised", "--html", "report.html",
            *as_json)
        (inputs / "drift.toml").write_text(f"[check]\nname = 'secrets'\nold = '{old}'\nnew = '{new}'\nsample = 100\n"
                                           f"alignment = '{work / 'align.vb'}'\nhistory = '{work / 'drift.sqlite'}'\n")
        run("drift", "run", inputs / "drift.toml", *as_json, code=None)
        run("drift", "history", inputs / "drift.toml", "--plot", "drift.html", *as_json)
        where = ["--field", f"v2_{tag}"] if kind == "pgvector" else ["--to", store.url(f"upgraded_{tag}", form)]
        run("upgrade", "start", old, "--to-model", MODEL, *where, "--fit-sample", 100, "--state", "up.sqlite",
            *as_json)
        run("upgrade", "status", "--state", "up.sqlite", *as_json)
    # failures: a server that is not there, an extra argument, --wrap without its alignment, an unencoded password
    dead = store.url(f"gone_{tag}", form, port=_free_port()) if kind != "chroma" else \
        store.url(f"gone_{tag}", port=_free_port())
    run("info", dead, *as_json, code=4)
    run("fit", "--source", dead, "--target", new, "--pairs", "ids", "-o", "dead.vb", *as_json, code=4)
    run("info", old, dead, code=2)
    run("search", "--wrap", old, "--vectors", inputs / "q.npy", code=None)
    if form == "userinfo":
        run("info", store.url(f"old_{STEM}", "unencoded"), code=3)

    captured = capfd.readouterr()
    printed = run.leaks(captured.out, captured.err, caplog.text)
    assert not printed, printed
    written = _files_with_secrets(work, *([store.root] if store.root else []))
    assert not written, written


def test_the_stores_kept_no_secret():
    """The servers' own data and logs and the local stores' files (collections, their stamps, statements logged),
    after every form ran."""
    if not SERVER_DIRS:
        pytest.skip("no store ran")
    leaked = _files_with_secrets(*dict.fromkeys(SERVER_DIRS))
    assert not leaked, leaked
