"""The report's verdict (GO, GO WITH CAUTION, NO-GO) and advice, read off its measured sections by a few
named rules against documented thresholds, and the options a NO-GO rules out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..results import (
    Report,
    Verdict,
)
from .options import ORTHO_OPTION

#: verdict thresholds (documented in the README): GO needs all of the "go" ones; NO-GO any of the "no_go" ones.
#: Top-1 is the measured one, among the held-out items (``held_out["pool"]``); its prediction at the collection's
#: size is reported beside it but does not move the verdict.
#: the verdicts each ``report --fail-on`` level fails on (a CI gate)
FAILING = {"no-go": ("NO-GO",), "caution": ("NO-GO", "CAUTION")}
THRESHOLDS = {
    "go_top1": 0.95,            # held-out top-1 of the true partner (among the held-out items)
    "go_retention": 0.90,       # predicted recall retention@k
    "no_go_top1": 0.50,
    "no_go_retention": 0.70,
    "worse_than_staying": 0.0,  # mapped recall below staying on A by more than this -> NO-GO
}


def ruled_out(report: "Report | dict", options, k: int) -> dict:
    """Options the verdict rules out, with why: under NO-GO the plain orthogonal map itself, and (when the three-way
    comparison is what said NO-GO) every option short of a full re-embed that retrieves worse than staying on the old
    model."""
    v = report["verdict"]
    if v["verdict"] != "NO-GO":
        return {}
    out = {ORTHO_OPTION: "the verdict (NO-GO) is about this map"}
    three = report.get("three_way")
    if three:
        stay = three["stay_on_old_model"] - report["thresholds"]["worse_than_staying"]
        for o in options:
            if o.reembed_fraction < 1.0 and o.recall < stay and o.name not in out:
                out[o.name] = (f"Recall@{k} {o.recall:.3f} is below staying on the old model "
                               f"({three['stay_on_old_model']:.3f})")
    return out


@dataclass
class _Facts:
    """What the verdict reads of a report (its sections by key, typed or plain dicts, as far as they go)."""

    t: dict
    top1: float
    among: str                 # " among N held-out items", or ""
    retrieval: dict
    retention: float | None    # predicted recall retention@k
    three: dict | None

    @classmethod
    def of(cls, report) -> "_Facts":
        ho, retrieval = report["held_out"], report.get("retrieval", {})
        pool = ho.get("pool")
        return cls(report["thresholds"], ho["top1"], f" among {pool:,} held-out items" if pool else "", retrieval,
                   retrieval.get("predicted"), report.get("three_way"))

    @property
    def worse_than_staying(self) -> bool:
        three = self.three
        return bool(three) and three["mapped_upgrade"] < three["stay_on_old_model"] - self.t["worse_than_staying"]

    def re_embed(self) -> str:
        full = self.three.get("full_re_embed")
        return f"; a full re-embed gives {full:.3f}" if full is not None else ""


def _staying_is_better(report, f: _Facts) -> Verdict | None:
    """New-model queries over the mapped vectors retrieve worse than the old model: NO-GO, or CAUTION when the old
    model is retired (staying is then no option)."""
    if not f.worse_than_staying:
        return None
    three = f.three
    if report.get("old_model_retired"):
        return Verdict("CAUTION", (
            f"the old model is retired, so staying is not an option: new-model queries over the mapped vectors reach "
            f"Recall@{three.get('k', 10)} {three['mapped_upgrade']:.3f} (the old model gave "
            f"{three['stay_on_old_model']:.3f}" + f.re_embed()
            + "): serve the mapped vectors now and re-embed in the background (vecbridge upgrade), or re-embed "
            "before switching"))
    return Verdict("NO-GO", (
        f"new-model queries over the mapped old vectors retrieve worse than staying on the old model "
        f"(Recall@{three.get('k', f.retrieval.get('k', 10))} {three['mapped_upgrade']:.3f} vs "
        f"{three['stay_on_old_model']:.3f}" + f.re_embed()
        + (f", among {three['pool']:,} sampled items" if three.get("pool") else "")
        + "): keep the old model or re-embed"))


def _untrusted_pairs(report, f: _Facts) -> Verdict | None:
    """Grown or unsupervised correspondences: NO-GO when they failed their label-free validation; CAUTION for
    pseudo-pairs (retention against a re-embed needs true pairs)."""
    c = report.get("correspondences", {})
    validation = c.get("validation")
    if validation and not validation["passed"]:
        what = "unsupervised" if c.get("pseudo") else "seed-grown"
        return Verdict("NO-GO", (
            f"the {what} correspondences failed their label-free validation (score {validation['score']:.2f} < "
            f"{validation['threshold']:.2f}: {validation['reason']}), so every figure below is measured on likely "
            f"wrong pairs: give seed pairs (--seeds) or re-embed a sample (--model/--text-field)"))
    if not c.get("pseudo"):
        return None
    ru = report.get("retrieval_unsupervised")
    got = "" if not ru else (f"; new-model queries over the mapped vectors reach Recall@{ru['k']} "
                             f"{ru['recall_mapped']:.3f} over {ru['pool']:,} sampled records" + (
                                 f", {ru['predicted']:.3f} predicted over all {ru['full_size']:,}"
                                 if ru.get("predicted") is not None else ""))
    return Verdict("CAUTION", (
        f"the correspondences are unsupervised pseudo-pairs ({c['mutual_fraction']:.0%} of the sample found a "
        f"mutual partner){got}; retention against a re-embed cannot be measured without true pairs: give "
        f"--model/--text-field or --seeds to measure it"))


def _no_alignment(report, f: _Facts) -> Verdict | None:
    """Too few held-out items find their own new vector: the spaces do not align."""
    if f.top1 >= f.t["no_go_top1"]:
        return None
    ho = report["held_out"]
    pred, full, pool = ho.get("top1_predicted"), ho.get("full_size"), ho.get("pool")
    word = "measured" if ho.get("top1_curve", {}).get("pool_sizes", [0])[-1] >= (full or 0) else "predicted"
    extra = (f"; {word} {pred:.0%} among the collection's {full:,} items"
             if pred is not None and full and pool and full > pool else "")
    return Verdict("NO-GO", f"only {f.top1:.0%} of held-out items find their own new vector "
                            f"(top-1{f.among} < {f.t['no_go_top1']:.0%}{extra}): the spaces do not align")


def _by_retention(report, f: _Facts) -> Verdict:
    """The last word: retention unreliable or unmeasured (CAUTION), too low (NO-GO), or both thresholds met (GO)."""
    t, top1, retention, retrieval = f.t, f.top1, f.retention, f.retrieval
    if retrieval.get("unreliable") and retention is None:
        return Verdict("CAUTION", (
            f"held-out top-1 {top1:.3f}{f.among}, but recall retention@{retrieval.get('k', 10)} is "
            f"{retrieval['unreliable']}: the queries hardly find their relevant documents even among the new "
            f"collection's own vectors, so the ratio would mean nothing (are they new-model query vectors whose ids "
            f"name their relevant documents?)"))
    if retention is not None and retention < t["no_go_retention"]:
        return Verdict("NO-GO", f"predicted recall retention@{retrieval['k']} {retention:.3f} is below "
                                f"{t['no_go_retention']}")
    if top1 >= t["go_top1"] and retention is not None and retention >= t["go_retention"]:
        return Verdict("GO", f"held-out top-1 {top1:.3f}{f.among} and predicted retention {retention:.3f} meet the "
                             f"GO thresholds ({t['go_top1']}, {t['go_retention']})")
    if retention is None:
        return Verdict("CAUTION", f"held-out top-1 is {top1:.3f}{f.among}, but without new-model queries the "
                                  f"retrieval quality kept cannot be measured (give --queries)")
    return Verdict("CAUTION", f"held-out top-1 {top1:.3f}{f.among}, predicted retention {retention:.3f}: usable, but "
                              f"below the GO thresholds ({t['go_top1']}, {t['go_retention']})")


def verdict(report: "Report | dict") -> Verdict:
    """GO / CAUTION / NO-GO with the reason in one sentence (``report``: a report's sections by key, typed or plain
    dicts, as far as they go): the first rule that speaks decides, in this order."""
    facts = _Facts.of(report)
    for rule in (_staying_is_better, _untrusted_pairs, _no_alignment):
        found = rule(report, facts)
        if found is not None:
            return found
    return _by_retention(report, facts)


def advice(report: "Report | dict") -> list[str]:
    out = []
    opt = report.get("options")
    if opt:
        out.append(f"recommended option: {opt['recommendation']['reason']}")
    c = report["learning_curve"]
    key = "retention" if "retention" in c else "top1"
    last = [v for v in c[key][-2:] if v is not None]
    if len(c[key]) >= 2 and len(last) == 2 and last[1] - last[0] > 0.01:
        out.append(f"more anchors would help: {key} rose from {last[0]:.3f} to {last[1]:.3f} between "
                   f"{c['n_anchors'][-2]:,} and {c['n_anchors'][-1]:,} anchors")
    corr = report["correspondences"]
    if corr["mode"] == "geh":
        n = corr.get("sampled")
        share = f" ({corr['n'] / n:.0%} of the {n:,} sampled)" if n else ""
        out.append(f"top-1 is measured on links GEH grew, the records it could link with confidence{share}: the "
                   "whole collection's top-1 can be lower (by 0.003-0.043 on the corpora measured, where the predicted "
                   "retention held within 0.014)")
    if report["fit"]["bound_vacuous"]:
        out.append("the worst-case Procrustes bound (When Embedding Models Meet: Procrustes Bounds and "
                   "Applications, 2025) is vacuous at this dimension; rely on the held-out numbers")
    return out


def threshold_failures(result, k: int, min_top1: float | None, min_retention: float | None) -> list[str]:
    """What of ``result`` (an :class:`~vecbridge.results.Evaluation`) falls below the thresholds given, in words.
    ``evaluate --min-top1/--min-retention`` exits 1 on any; without queries a retention threshold is refused."""
    failures = []
    if min_top1 is not None and result.pairs.top1 < min_top1:
        failures.append(f"top-1 {result.pairs.top1:.3f} < {min_top1}")
    if min_retention is not None:
        if result.retrieval is None:
            raise InputError("--min-retention needs --queries")
        retention = result.retrieval.retention
        if retention is None:   # the native recall is too low for the ratio to mean anything: not a pass
            failures.append(f"retention@{k} {result.retrieval.unreliable or 'unreliable'}")
        elif retention < min_retention:
            failures.append(f"retention@{k} {retention:.3f} < {min_retention}")
    return failures
