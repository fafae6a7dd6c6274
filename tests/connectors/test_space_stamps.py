"""On every real engine (Milvus as Lite: WORKFLOW_ENGINES): what migrate and merge write carries its space's stamp,
`info` shows it, and a map applied to a collection of the wrong space is refused before anything is written."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.runtime.provenance import attach_spaces, fingerprint_vectors

from .conftest import WORKFLOW_ENGINES

N = 200


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def mapped(sample, tmp_path_factory):
    """MiniLM documents -> MPNet documents, both sides fingerprinted as `fit` does; saved once."""
    est = OrthogonalProcrustes().fit(sample.docs_old, sample.docs_new)
    a = attach_spaces(Alignment.from_estimator(est, source_model="minilm", target_model="mpnet"),
                      fingerprint_vectors(sample.docs_old, model="minilm"),
                      fingerprint_vectors(sample.docs_new, model="mpnet"))
    return a.save(tmp_path_factory.mktemp("stamps") / "a.vb")


@pytest.fixture(scope="module")
def rotated_map(sample, tmp_path_factory):
    """MiniLM -> MiniLM rotated by a random orthogonal map: a map between two spaces of one dimension."""
    q, r_ = np.linalg.qr(np.random.default_rng(0).standard_normal((384, 384)))
    rotated = (sample.docs_old @ (q * np.sign(np.diag(r_)))).astype(np.float32)
    est = OrthogonalProcrustes().fit(sample.docs_old, rotated)
    return attach_spaces(Alignment.from_estimator(est), fingerprint_vectors(sample.docs_old),
                         fingerprint_vectors(rotated)).save(tmp_path_factory.mktemp("rot") / "rot.vb")


def _write(url, vectors, sample):
    coll = connect(url).create(dim=vectors.shape[1])
    coll.upsert(VectorBatch(list(sample.ids[:N]), vectors[:N], [{"text": t["doc"]} for t in sample.items[:N]]))
    return coll


@pytest.mark.engines(*WORKFLOW_ENGINES)   # the stamps' connector code: test_stamp
def test_what_is_written_is_stamped_and_a_wrong_space_refused(engine, new_url, sample, mapped, rotated_map):
    """migrate and merge stamp what they write; `info` shows it; the same-dimension map MiniLM -> MiniLM rotated
    (another 384-d space) applied again to what it wrote is refused by the stamp (exit 1), nothing written."""
    old, new = _write(new_url("old"), sample.docs_old, sample), _write(new_url("new"), sample.docs_new, sample)
    out, merged, again = new_url("out"), new_url("merged"), new_url("again")
    r = cli("migrate", old.url, "--alignment", mapped, "--to", out, "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(cli("info", out, "--json").output)
    assert shown["stamp"]["origin"] == "mapped" and shown["stamp"]["space"]["model"] == "mpnet"
    # every record carries its own stamp too, written with its vector
    assert shown["records"]["stamped"] == N and shown["records"]["origins"] == {"mapped": N}
    assert [(s["model"], s["dim"], s["records"]) for s in shown["records"]["spaces"].values()] == [("mpnet", 768, N)]
    got = connect(out, read_only=True).get(list(sample.ids[:3]))
    assert [s["origin"] for s in got.stamps] == ["mapped"] * 3 and got.payloads[0] == {"text": sample.items[0]["doc"]}
    r = cli("merge", old.url, new.url, "--into", merged, "--alignment", mapped, "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(cli("info", merged, "--json").output)
    assert shown["stamp"]["origin"] == "merged"
    assert shown["records"]["stamped"] == N and set(shown["records"]["origins"]) <= {"native", "mapped"}
    rot_out = new_url("rot")
    assert cli("migrate", old.url, "--alignment", rotated_map, "--to", rot_out).exit_code == 0
    r = cli("migrate", rot_out, "--alignment", rotated_map, "--to", again)
    assert r.exit_code == 1 and "stamp" in r.output and "wrong way" in r.output, r.output
    assert not connect(again).exists()
