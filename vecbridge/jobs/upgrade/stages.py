"""The upgrade's stages as one table: which verbs each stage allows and the stage each leads to, checked by one
function (:func:`check`) that every verb calls, so that a refusal says the same thing wherever it comes from.

::

    starting --start--> mapped --cutover--> cutover --finalize / drop-old--> finalized --drop-old--> finalized
                                    ^          |
                                    |       rollback
                                 cutover       |
                                    |          v
                                    +---- rolled-back

``reembed`` and ``learn-queries`` keep the stage they run in (``learn-queries`` runs after ``finalize`` too).
"""
from __future__ import annotations

from ...errors import InputError

#: stage -> {verb: the stage it leads to}; a verb missing from its stage's row is refused by :func:`check`
TRANSITIONS: dict[str, dict[str, str]] = {
    "starting": {"start": "mapped"},
    "mapped": {"reembed": "mapped", "learn-queries": "mapped", "cutover": "cutover"},
    "cutover": {"reembed": "cutover", "learn-queries": "cutover", "rollback": "rolled-back", "finalize": "finalized",
                "drop-old": "finalized"},
    "rolled-back": {"reembed": "rolled-back", "learn-queries": "rolled-back", "cutover": "cutover"},
    "finalized": {"learn-queries": "finalized", "drop-old": "finalized"},
}
#: the stages of an upgrade whose start finished
STAGES = tuple(stage for stage in TRANSITIONS if stage != "starting")


def check(meta: dict, verb: str, path, *, completed: str | None = None) -> str:
    """The stage ``verb`` leads to from the stage the state document ``meta`` is in, or :class:`InputError` in one
    line: an unfinished start or drop first (naming the command that completes it), then a verb the stage does not
    allow. ``completed``: the stage an interrupted switch was completed to just now; rerunning the verb that was
    making it is allowed whatever the stage (it switches again, which is harmless). ``path``: the state file."""
    stage = meta["stage"]
    if verb != "start":
        if stage == "starting":
            raise InputError(f"the upgrade's start did not finish ({path}): run the same `vecbridge upgrade start` "
                             f"again to complete it")
        if meta.get("dropping"):
            raise InputError(f"finalize stopped while dropping {meta['dropping']} ({path}): run `vecbridge upgrade "
                             f"finalize --drop-old --yes` again to complete it")
    row = TRANSITIONS.get(stage, {})
    if verb == "drop-old" and meta.get("dropped"):
        row = {}   # nothing left to drop
    if verb in row:
        return row[verb]
    if completed is not None and completed in _leads_to(verb):
        return completed
    raise InputError(_refusal(meta, verb, path))


def _leads_to(verb: str) -> set[str]:
    return {row[verb] for row in TRANSITIONS.values() if verb in row}


def _refusal(meta: dict, verb: str, path) -> str:
    """Why ``verb`` cannot run in the stage ``meta`` is in, in words."""
    stage = meta["stage"]
    if verb == "start":
        return (f"an upgrade is already under way with the state file {path}: see `vecbridge upgrade status`, or "
                f"choose another state file")
    if verb in ("finalize", "drop-old"):
        if stage == "finalized":
            dropped = meta.get("dropped")
            return "the upgrade is already finalized" + (f" and {dropped} was dropped" if dropped else "")
        return f"the upgrade is {stage}: finalize after a cutover"
    sources = [s for s, row in TRANSITIONS.items() if verb in row]
    moves = [row[verb] for s, row in TRANSITIONS.items() if verb in row and row[verb] != s]
    if moves:   # a verb that moves the upgrade to another stage
        return f"the upgrade is {stage}: {moves[0]} is possible only from {' or '.join(sources)}"
    return f"the upgrade is {stage}"
