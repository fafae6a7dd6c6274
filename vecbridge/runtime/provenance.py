"""Provenance: which embedding space a collection is in, and whether a map may be applied to it.

A map fitted from space A to space B is right for A's vectors only, and two models of the same dimension cannot be
told apart by shape: applied to the wrong collection, a migration runs to the end and every count checks out. So an
alignment carries a fingerprint of both of its sides (:func:`attach_spaces`: documents go source -> target, queries
target -> source), each collection vecbridge writes carries a stamp naming its space (:func:`make_stamp`), and every
command that applies a map asks :func:`check_space` first: by the stamp when there is one, otherwise by a label-free
test on a sample (:mod:`vecbridge.quality.space`). A mismatch is refused before anything is written; ``force``
applies the map anyway, says so, and the check's record says it was forced.
"""
from __future__ import annotations

import datetime as _dt
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from .._version import __version__
from ..align.artifact import Alignment
from ..connectors.base import Collection
from ..errors import InputError, SpaceMismatch
from ..quality.space import ACCEPT_FRACTION, MIN_SAMPLE, SpaceFingerprint, mixture, which_space
from ..records import StampColumns

#: vectors sampled from each side to fingerprint it when a map is fitted
FINGERPRINT_SAMPLE = 5000
#: vectors sampled from a collection to check its space
CHECK_SAMPLE = 1000
#: share of a sample that, once confirmed by its own mean direction, makes a collection "mixed"
MIXED_SHARE = 0.03
#: which way each kind of vector goes through a map
DIRECTIONS = {"documents": "source -> target", "queries": "target -> source"}
SIDES = ("source", "target")
STAMP_FORMAT = "vecbridge.space"


# --- fingerprints of a map's two sides ------------------------------------------------------------------------------
def fingerprint_vectors(vectors, *, model=None, normalization=None, prefixes=None,
                        seed: int = 0) -> SpaceFingerprint | None:
    """A fingerprint of ``vectors`` (at most :data:`FINGERPRINT_SAMPLE` rows, seeded), None for fewer than 4 rows
    or rows that cannot be fingerprinted (zero vectors: the fit itself reports those)."""
    X = np.asarray(vectors)
    if X.ndim != 2 or len(X) < 4:
        return None
    if len(X) > FINGERPRINT_SAMPLE:
        X = X[np.sort(np.random.default_rng(seed).choice(len(X), FINGERPRINT_SAMPLE, replace=False))]
    try:   # one projection for every fingerprint (seed 0), so any two of one dimension can be mixed and compared
        return SpaceFingerprint.from_vectors(X, model=model, normalization=normalization, prefixes=prefixes)
    except InputError:
        return None


def fingerprint_collection(coll: Collection, *, model=None, normalization=None, prefixes=None, seed: int = 0,
                           n: int = FINGERPRINT_SAMPLE) -> SpaceFingerprint | None:
    """A fingerprint of a seeded sample of ``coll``."""
    return fingerprint_vectors(coll.sample(n, seed=seed).vectors, model=model, normalization=normalization,
                               prefixes=prefixes, seed=seed)


def attach_spaces(alignment: Alignment, source: SpaceFingerprint | None, target: SpaceFingerprint | None) -> Alignment:
    """Record both sides' fingerprints in the artifact, with the direction each kind of vector goes."""
    if source is not None and target is not None:
        alignment.metadata["spaces"] = {"source": source.as_dict(), "target": target.as_dict(), **DIRECTIONS}
    return alignment


def spaces_of(alignment: Alignment) -> dict[str, SpaceFingerprint] | None:
    """``{"source": ..., "target": ...}`` of an artifact, None for one saved without them."""
    spaces = alignment.metadata.get("spaces")
    if not isinstance(spaces, dict):
        return None
    try:
        return {side: SpaceFingerprint.from_dict(spaces[side]) for side in SIDES}
    except (KeyError, InputError):
        return None


# --- stamps -------------------------------------------------------------------------------------------------------
def make_stamp(space: SpaceFingerprint, *, origin: str, alignment: Alignment | None = None, source: str | None = None,
               forced: str | None = None) -> dict:
    """What a collection vecbridge wrote says about itself: its space, how its vectors were made (``native``,
    ``mapped``, ``merged``, ``upgrade``), by which map and from where, and whether a space check was overridden."""
    from ..secrets import scrub

    return scrub({"format": STAMP_FORMAT, "version": 1, "space": space.as_dict(), "origin": origin,
                  "map": alignment.fingerprint if alignment is not None else None,
                  "map_direction": DIRECTIONS["documents"] if alignment is not None else None,
                  "from": source, "forced": forced, "vecbridge_version": __version__,
                  "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})


def stamp_alignment_target(coll: Collection, alignment: Alignment, *, origin: str, source: str | None = None,
                           forced: str | None = None) -> dict | None:
    """Stamp ``coll`` as holding vectors in ``alignment``'s target space; nothing when the map has no fingerprints."""
    spaces = spaces_of(alignment)
    if spaces is None:
        return None
    stamp = make_stamp(spaces["target"], origin=origin, alignment=alignment, source=source, forced=forced)
    coll.write_stamp(stamp)
    return stamp


def record_stamp(origin: str, made_by: str, space: SpaceFingerprint | None, *, dim: int | None = None,
                 **fields) -> dict:
    """One record's own stamp, written with its vector: how the vector was made (``origin``: mapped, native,
    pending, merged; ``made_by``: the map's fingerprint or the model's name) and the space it is in (its fingerprint's
    digest, model, dimension, normalization); ``fields`` (the upgrade's digest and priority scores) where not None."""
    stamp = {"origin": origin, "made_by": made_by}
    if space is not None:
        stamp.update(space=space.digest, model=space.model, dim=space.dim, normalization=space.normalization)
    elif dim is not None:
        stamp["dim"] = int(dim)
    stamp.update({k: v for k, v in fields.items() if v is not None})
    return stamp


class MapStamps:
    """The record stamps of what a map writes (``origin`` mapped: made by the map, in its target space; ``native``:
    vectors already in the target space, made by its model): a small picklable callable ``(batch, new vectors) ->
    stamps`` that travels to every worker of a job."""

    def __init__(self, alignment: Alignment, origin: str = "mapped"):
        spaces = spaces_of(alignment)
        made_by = alignment.fingerprint if origin == "mapped" else (
            alignment.metadata.get("target_model") or "the target space's own model")
        self.base = record_stamp(origin, made_by, spaces["target"] if spaces else None, dim=alignment.target_dim)

    def __call__(self, batch, vectors) -> StampColumns:
        """The same stamp for every record, as columns: the store keeps it once (no dict or JSON text a record)."""
        return StampColumns(self.base, None, len(batch.ids))


#: stamped records ``vecbridge info`` reads at most (a count over more says so)
INFO_RECORDS = 100_000


def record_stamps_summary(coll: Collection, limit: int = INFO_RECORDS) -> dict | None:
    """What ``vecbridge info`` shows of the records' own stamps: how many carry one, per origin and per space
    (model, dimension, digest); None when the store keeps none. Reads at most ``limit`` stamped records."""
    if not coll.capabilities.record_stamps:
        return None
    origins: dict = {}
    spaces: dict = {}
    seen = 0
    for _, stamps in coll.scan_stamps(batch_size=5000):
        for st in stamps:
            origins[st["origin"]] = origins.get(st["origin"], 0) + 1
            key = st.get("space") or f"{st.get('dim', '?')}-d, no fingerprint"
            entry = spaces.setdefault(key, {"model": st.get("model"), "dim": st.get("dim"), "records": 0})
            entry["records"] += 1
        seen += len(stamps)
        if seen >= limit:
            break
    out = {"kept_in": coll.capabilities.record_stamps, "stamped": seen, "origins": origins, "spaces": spaces}
    if seen >= limit:
        out["note"] = f"counted over the first {seen:,} stamped records only"
    return out


def read_stamp(coll: Collection) -> dict | None:
    """The vecbridge stamp of ``coll``, None when it has none (or one this version cannot read)."""
    stamp = coll.read_stamp()
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT:
        return None
    return stamp


def stamp_space(stamp: dict | None) -> SpaceFingerprint | None:
    if not stamp:
        return None
    try:
        return SpaceFingerprint.from_dict(stamp["space"])
    except (KeyError, TypeError, InputError):
        return None


def stamp_summary(stamp: dict | None) -> dict | None:
    """What ``info`` shows of a stamp: the space's identity, not its vectors."""
    space = stamp_space(stamp)
    if space is None:
        return None
    return {"space": space.summary(), **{k: stamp.get(k) for k in ("origin", "map", "map_direction", "from", "forced",
                                                                   "written_at", "vecbridge_version")}}


# --- the check ----------------------------------------------------------------------------------------------------
@dataclass
class SpaceCheck:
    """The answer of :func:`check_space`: ``verdict`` ok, mismatch, mixed or unchecked; the side found (None:
    neither), how (stamp or sample), one line saying why, and whether a refusal was overridden."""

    collection: str
    expected: str
    verdict: str
    found: str | None
    by: str | None
    reason: str
    forced: bool = False
    fractions: dict | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in ("ok", "unchecked")

    def as_dict(self) -> dict:
        return asdict(self)


def _stamp_side(space: SpaceFingerprint, spaces: dict) -> tuple[str | None, str]:
    """Which of the map's sides a stamp's space is, by the same mean-direction score a sample gets."""
    scores = {side: fp.score_fingerprint(space) for side, fp in spaces.items() if fp.dim == space.dim}
    best = max(scores, key=scores.get) if scores else None
    return (best if best is not None and scores[best] >= ACCEPT_FRACTION else None), f"its stamp says {space.label()}"


def _sample_side(sample: np.ndarray, spaces: dict) -> tuple[str | None, str]:
    match = which_space(sample, spaces)
    ranked = sorted(((s, side) for side, s in match.scores.items() if s is not None), reverse=True)
    scores = ", ".join(f"{side} {s:.2f}" for s, side in ranked)
    return match.name, f"a sample of {len(sample):,} vectors scores {scores}; {ACCEPT_FRACTION:.2f} accepts"


def _refusal(check: SpaceCheck, spaces: dict, url: str) -> str:
    want = spaces[check.expected].label()
    if check.verdict == "mixed":
        parts = ", ".join(f"about {share:.0%} like the map's {side} space ({spaces[side].label()})"
                          for side, share in check.fractions.items() if side != check.expected and share > 0)
        return (f"{url} holds more than one embedding space: {parts}, the rest like {want}; migrate a collection "
                f"that holds one space (or --force to map every record anyway)")
    if check.found is not None:
        return (f"{url} is in the map's {check.found} space ({spaces[check.found].label()}), not its "
                f"{check.expected} space ({want}): the map would be applied the wrong way ({check.reason}); "
                f"--force applies it anyway")
    return (f"{url} is in neither of the map's spaces (expected its {check.expected} space, {want}; "
            f"{check.reason}): wrong collection or wrong alignment? --force applies it anyway")


def check_space(coll: Collection, alignment: Alignment, side: str, *, force: bool = False, mixed: bool = False,
                seed: int = 0, n: int = CHECK_SAMPLE) -> SpaceCheck:
    """Is ``coll`` in ``alignment``'s ``side`` space? By its stamp when it has one, otherwise by a sample of ``n``
    vectors; with ``mixed``, a sample also checks that the collection is in one space only.

    A mismatch raises :class:`~vecbridge.errors.SpaceMismatch` (exit 1) with one line saying what was expected and
    what was found; ``force`` warns instead and marks the check ``forced``. An artifact without fingerprints, or a
    space without a recognisable mean direction, is ``unchecked`` (and says why)."""
    if side not in SIDES:
        raise InputError(f"side must be one of {', '.join(SIDES)}, got {side!r}")
    url = coll.display_url
    spaces = spaces_of(alignment)
    if spaces is None:
        return SpaceCheck(url, side, "unchecked", None, None, "the alignment records no space fingerprints (saved "
                          "by an older vecbridge): refit it to have collections checked")
    found, by, reason, fractions = None, None, "", None
    space = stamp_space(read_stamp(coll))
    if space is not None and space.distinctive:
        (found, reason), by = _stamp_side(space, spaces), "stamp"
    sample = None
    if by is None or mixed:
        sample = coll.sample(n, seed=seed).vectors
        if len(sample) < MIN_SAMPLE or not spaces[side].distinctive:
            if by is None:
                why = (f"a sample of {len(sample)} vectors is too small to tell spaces apart"
                       if len(sample) < MIN_SAMPLE else "the map's spaces have no recognisable mean direction")
                return SpaceCheck(url, side, "unchecked", None, None, why)
            sample = None
        elif by is None:
            (found, reason), by = _sample_side(sample, spaces), "sample"
    verdict = "ok" if found == side else "mismatch"
    if verdict == "ok" and sample is not None and mixed:
        same_dim = {s: fp for s, fp in spaces.items() if fp.dim == sample.shape[1]}
        if len(same_dim) > 1:
            mix = mixture(sample, same_dim)
            others = mix.others(side, min_share=MIXED_SHARE)
            fractions = {s: round(f, 4) for s, f in mix.fractions.items()}
            if others:
                verdict = "mixed"
    check = SpaceCheck(url, side, verdict, found, by, reason or "", fractions=fractions)
    if check.ok:
        return check
    line = _refusal(check, spaces, url)
    if not force:
        raise SpaceMismatch(line)
    warnings.warn(f"{line.split(': ', 1)[0]}: applied anyway (--force)", UserWarning, stacklevel=2)
    check.forced = True
    check.reason = line
    return check


# --- which spaces a collection holds ------------------------------------------------------------------------------
def space_report(coll: Collection, alignments=(), *, n: int = CHECK_SAMPLE, seed: int = 0) -> dict:
    """What ``info URL --space`` shows: the collection's stamp, and from a sample of ``n`` vectors the share that
    looks like each known space (the stamp's, and both sides of each alignment given: ``(name, Alignment)``) and the
    space the sample as a whole is in (or none)."""
    stamp = read_stamp(coll)
    known: dict[str, SpaceFingerprint] = {}
    if stamp_space(stamp) is not None:
        known["stamp"] = stamp_space(stamp)
    for name, alignment in alignments:
        for side, fp in (spaces_of(alignment) or {}).items():
            known[f"{side} of {name}"] = fp
    known = _distinct(known)
    sample = coll.sample(n, seed=seed).vectors
    out = {"collection": coll.display_url, "stamp": stamp_summary(stamp), "sample": int(len(sample)), "spaces": {}}
    if not known:
        out["verdict"] = ("no known space: give --alignment FILE (an artifact that records its spaces) or stamp the "
                          "collection by writing it with vecbridge")
        return out
    if len(sample) < MIN_SAMPLE:
        out["verdict"] = f"a sample of {len(sample)} vectors is too small to tell spaces apart"
        return out
    same_dim = {k: fp for k, fp in known.items() if fp.dim == sample.shape[1]}
    match = which_space(sample, known)
    mix = mixture(sample, same_dim) if same_dim else None
    for name, fp in known.items():
        score, share = match.scores.get(name), mix.fractions.get(name) if mix is not None else None
        out["spaces"][name] = {"space": fp.label(), "digest": fp.digest,
                               "score": None if score is None else round(score, 3),
                               "fraction": None if share is None or name not in same_dim else round(share, 3)}
    mixed = mix.others(match.name, min_share=MIXED_SHARE) if (mix is not None and match.name) else {}
    out["in"] = match.name
    out["verdict"] = (f"mixed: mostly {match.name}, also " + ", ".join(f"{k} ({v:.0%})" for k, v in mixed.items())
                      if mixed else f"one space: {match.name}" if match.name else f"none of the known spaces "
                      f"({match.reason})")
    return out


def _distinct(known: dict[str, SpaceFingerprint]) -> dict[str, SpaceFingerprint]:
    """Known fingerprints of one space (a stamp and the side of a map fitted on the same model) counted once, under
    all their names: two fingerprints of one space would split its share between them."""
    groups: list[tuple[list[str], SpaceFingerprint]] = []
    for name, fp in known.items():
        for names, rep in groups:
            if rep.dim == fp.dim and (rep.digest == fp.digest or min(
                    rep.score_fingerprint(fp), fp.score_fingerprint(rep)) >= ACCEPT_FRACTION):
                names.append(name)
                break
        else:
            groups.append(([name], fp))
    return {" = ".join(names): fp for names, fp in groups}
