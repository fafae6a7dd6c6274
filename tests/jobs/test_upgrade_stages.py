"""The upgrade's parts: every verb checks the one stage table (and refuses in the words it always used), the served
score is the shared fusion formula bit for bit, and re-embedding workers travel to other processes without the
upgrade's handles. File store, the lookup model."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import write_collection
from vecbridge.errors import InputError
from vecbridge.jobs.upgrade import FUSION_BETAS, HUB_WEIGHTS, TRANSITIONS, Upgrade, base, start
from vecbridge.jobs.upgrade.scheduler import Reembedder
from vecbridge.jobs.upgrade.stages import check
from vecbridge.quality.scoring import fused_scores

MODEL = "tests.embedders:mpnet_lookup"
N, FIT = 400, 200
pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")   # 200 fit pairs, 384 dims


@pytest.fixture
def upgrade(tmp_path, sample):
    """A started upgrade of N records (FIT of them native), new vectors in a collection of their own."""
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:N], sample.docs_old[:N],
                           [{"text": it["doc"]} for it in sample.items[:N]])
    state = tmp_path / "u.upgrade.sqlite"
    start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new", fit_sample=FIT)
    return state


def _refused(fn, match: str) -> None:
    with pytest.raises(InputError) as err:
        fn()
    assert str(err.value) == match


def test_verbs_refuse_in_the_words_they_always_used(upgrade, sample):
    with Upgrade.open(upgrade) as up:
        _refused(up.rollback, "the upgrade is mapped: rolled-back is possible only from cutover")
        _refused(up.finalize, "the upgrade is mapped: finalize after a cutover")
        _refused(lambda: up.finalize(drop_old=True), "the upgrade is mapped: finalize after a cutover")
        up.reembed()
        up.cutover()
        _refused(up.cutover, "the upgrade is cutover: cutover is possible only from mapped or rolled-back")
        up.rollback()
        _refused(up.rollback, "the upgrade is rolled-back: rolled-back is possible only from cutover")
        _refused(up.finalize, "the upgrade is rolled-back: finalize after a cutover")
        up.cutover()
        assert up.finalize()["stage"] == "finalized"
        _refused(up.finalize, "the upgrade is already finalized")
        _refused(up.reembed, "the upgrade is finalized")
        _refused(up.cutover, "the upgrade is finalized: cutover is possible only from mapped or rolled-back")
        up.learn_queries(sample.queries_new[:50])   # a query log is still welcome
        dropped = up.finalize(drop_old=True)["dropped"]
        _refused(lambda: up.finalize(drop_old=True), f"the upgrade is already finalized and {dropped} was dropped")


def test_every_verb_checks_the_one_stage_table(upgrade, sample, monkeypatch):
    checked = []

    def recording(meta, verb, path, **kw):
        checked.append((meta["stage"], verb))
        return check(meta, verb, path, **kw)

    monkeypatch.setattr(base, "check", recording)
    with Upgrade.open(upgrade) as up:
        up.reembed(limit=10)
        up.learn_queries(sample.queries_new[:50])
        up.cutover()
        up.rollback()
        up.cutover()
        up.reembed()
        up.finalize()
        up.finalize(drop_old=True)
        assert up.status()["stage"] == "finalized"
    assert checked == [("mapped", "reembed"), ("mapped", "learn-queries"), ("mapped", "cutover"),
                       ("cutover", "rollback"), ("rolled-back", "cutover"), ("cutover", "reembed"),
                       ("cutover", "finalize"), ("finalized", "drop-old")]
    assert all(TRANSITIONS[stage][verb] for stage, verb in checked)


@pytest.mark.parametrize("meta, verb, expected", [
    ({"stage": "starting"}, "start", "mapped"),
    ({"stage": "mapped"}, "start", "an upgrade is already under way with the state file S: see `vecbridge upgrade "
                                   "status`, or choose another state file"),
    ({"stage": "starting"}, "cutover", "the upgrade's start did not finish (S): run the same `vecbridge upgrade "
                                       "start` again to complete it"),
    ({"stage": "cutover", "dropping": "the old collection x"}, "reembed",
     "finalize stopped while dropping the old collection x (S): run `vecbridge upgrade finalize --drop-old --yes` "
     "again to complete it"),
    ({"stage": "cutover"}, "cutover", "the upgrade is cutover: cutover is possible only from mapped or rolled-back"),
    ({"stage": "finalized"}, "reembed", "the upgrade is finalized"),
    ({"stage": "finalized"}, "learn-queries", "finalized"),
    ({"stage": "cutover"}, "drop-old", "finalized"),
    ({"stage": "finalized"}, "drop-old", "finalized"),
    ({"stage": "finalized", "dropped": "x"}, "drop-old", "the upgrade is already finalized and x was dropped"),
])
def test_the_stage_table(meta, verb, expected):
    if expected in TRANSITIONS:
        assert check(meta, verb, "S") == expected
    else:
        with pytest.raises(InputError) as err:
            check(meta, verb, "S")
        assert str(err.value) == expected


def test_a_rerun_completes_its_own_switch_only():
    """A cutover killed after its switch is completed before the guard runs: the rerun of that cutover is allowed
    (it switches again), a rollback is not."""
    assert check({"stage": "cutover"}, "cutover", "S", completed="cutover") == "cutover"
    with pytest.raises(InputError, match="rolled-back is possible only from cutover"):
        check({"stage": "rolled-back"}, "rollback", "S", completed="cutover")


def _old_score(cos_new, cos_old, hub, beta, weight):
    """The upgrade's fusion score as it was written before it used the shared formula."""
    if cos_old is not None and np.isinf(beta):
        return cos_old
    s = cos_new if cos_old is None or beta == 0 else (cos_new + beta * cos_old) / (1.0 + beta)
    return s - weight * hub if weight else s


def _old_fused_scores(q_new, mapped_docs, q_old, old_docs, beta=1.0, penalty=None, weight=0.0):
    from vecbridge.vectors import l2_normalize

    S = l2_normalize(q_new) @ l2_normalize(mapped_docs).T
    if beta:
        S += beta * (l2_normalize(q_old) @ l2_normalize(old_docs).T)
    if penalty is not None and weight:
        S -= weight * np.asarray(penalty, dtype=S.dtype)[None, :]
    return S


def test_the_served_score_is_the_shared_fusion_formula_bit_for_bit(sample):
    rng = np.random.default_rng(0)
    cn, co = (rng.uniform(-1, 1, 300).astype(np.float32) for _ in range(2))
    hub = rng.uniform(0, 1, 300).astype(np.float32)
    for beta in FUSION_BETAS:
        for w in HUB_WEIGHTS:
            for old in (co, None):
                got, want = Upgrade._score(cn, old, hub, beta, w), _old_score(cn, old, hub, beta, w)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (beta, w, old is None)
    args = (sample.queries_new[:40], sample.docs_new[:300], sample.queries_old[:40], sample.docs_old[:300])
    for beta in (0.0, 0.5, 1.0, 3.0):
        for w in (0.0, 0.5):
            got = fused_scores(*args, beta=beta, penalty=hub, weight=w)
            assert got.tobytes() == _old_fused_scores(*args, beta=beta, penalty=hub, weight=w).tobytes()


def test_a_reembedder_travels_as_names_and_works_alike(upgrade, sample):
    """Here the worker is the upgrade's own model and target; pickled (for a Ray actor) it carries the model's name and
    the state's URLs only, and once made in the other process writes the same vectors."""
    with Upgrade.open(upgrade) as up:
        here = Reembedder(up)
        assert here() is here
        batch = up.source.get(sample.ids[FIT:FIT + 5])
        landed = here.embed_and_write(batch.ids)
        assert landed.written == batch.ids and landed.new.shape == (5, 768) and landed.no_text == landed.gone == []
        np.testing.assert_array_equal(landed.old, batch.vectors)
        local = up.target.get(batch.ids)
        shipped = pickle.loads(pickle.dumps(here))
        assert not isinstance(shipped, Reembedder) and "sqlite" not in repr(vars(shipped))
        remote = shipped()
        up.target.upsert(batch.with_vectors(np.zeros_like(local.vectors)))   # overwritten: the remote writes again
        assert remote.embed_and_write(batch.ids).written == batch.ids
        again = up.target.get(batch.ids)
        np.testing.assert_array_equal(again.vectors, local.vectors)
        assert again.stamps == local.stamps and {s["origin"] for s in again.stamps} == {"native"}
        assert local.vectors.shape == (5, 768)


def test_the_old_ray_entry_point_warns_and_runs_the_job_on_the_engine():
    import vecbridge.jobs as jobs

    with pytest.warns(DeprecationWarning, match=r"Upgrade\.reembed\(\.\.\., engine=RayEngine"):
        twin = jobs.reembed_on_ray
    assert twin.__name__ == "reembed_on_ray"
