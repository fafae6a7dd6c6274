"""How the records of two collections correspond: one grammar, parsed here, for every command that needs pairs.

=================  ==========================================================================================
``ids``            the same id in both collections
``field:NAME``     the same value of payload field NAME (a URL, a text hash)
``file:PATH``      a CSV/JSON file of ``source_id,target_id`` pairs, or a links file (``.npz``) from ``link``
``reembed``        re-embed the old collection's stored texts with the new model (needs a model and a text field)
``reference:PATH`` embed a public text file with both models (needs both models)
``geh:PATH``       grow the seed pairs in a CSV/JSON file into links (GEH)
``unsupervised``   nothing shared at all: mini-vec2vec
=================  ==========================================================================================

Older spellings are read for one release, with a :class:`DeprecationWarning`: a bare file path (``a.csv``) and
``pairs:PATH`` for ``file:PATH``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

#: kind -> (takes a value, what the value is, the label artifacts and reports use)
KINDS: dict[str, tuple[bool, str, str]] = {
    "ids": (False, "", "shared-ids"),
    "field": (True, "NAME", "payload-field"),
    "file": (True, "PATH", "pairs-file"),
    "reembed": (False, "", "re-embedded-sample"),
    "reference": (True, "PATH", "reference-corpus"),
    "geh": (True, "PATH", "geh"),
    "unsupervised": (False, "", "unsupervised"),
}
_PAIRS_FILE_SUFFIXES = (".csv", ".json", ".tsv", ".txt", ".npz")


@dataclass(frozen=True)
class PairSpec:
    """One way of pairing records (see the module docstring); ``str(spec)`` is its canonical spelling."""

    kind: str
    value: str = ""

    @classmethod
    def parse(cls, text: "str | PairSpec", allowed: tuple[str, ...] | None = None) -> "PairSpec":
        """Read a spelling; ``allowed`` limits the kinds (a command that cannot use the others says so)."""
        if isinstance(text, PairSpec):
            spec = text
        else:
            spec = cls._read(str(text).strip())
        if allowed is not None and spec.kind not in allowed:
            raise InputError(f"pairing {str(spec)!r} cannot be used here; use one of: "
                             f"{', '.join(cls.grammar(allowed))}")
        return spec

    @classmethod
    def _read(cls, text: str) -> "PairSpec":
        kind, sep, value = text.partition(":")
        if kind == "pairs" and sep:
            cls._deprecated(text, f"file:{value}")
            kind = "file"
        if kind in KINDS:
            takes_value = KINDS[kind][0]
            if takes_value and not value:
                raise InputError(f"pairing {kind}:{KINDS[kind][1]} needs its {KINDS[kind][1].lower()}")
            if not takes_value and sep:
                raise InputError(f"pairing {kind!r} takes no value (got {text!r})")
            return cls(kind, value)
        if text and (Path(text).suffix.lower() in _PAIRS_FILE_SUFFIXES or Path(text).is_file()):
            cls._deprecated(text, f"file:{text}")
            return cls("file", text)
        raise InputError(f"unknown pairing {text!r}; use one of: {', '.join(cls.grammar())}")

    @staticmethod
    def _deprecated(old: str, new: str) -> None:
        warnings.warn(f"the pairing {old!r} is spelled {new!r} now; the old spelling goes in the next release",
                      DeprecationWarning, stacklevel=4)

    @staticmethod
    def grammar(kinds: tuple[str, ...] | None = None) -> list[str]:
        """The spellings of ``kinds`` (all by default), for messages and help texts."""
        return [k + (f":{KINDS[k][1]}" if KINDS[k][0] else "") for k in (kinds or tuple(KINDS))]

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}" if self.value else self.kind

    @property
    def label(self) -> str:
        """The name reports and artifacts give this way of pairing (``shared-ids``, ``payload-field``, ...)."""
        return KINDS[self.kind][2]

    def describe(self) -> dict:
        """For an artifact's metadata: how its anchors were obtained (a file by its name, never its folder)."""
        out = {"method": self.label}
        if self.kind == "field":
            out["field"] = self.value
        elif self.value:
            out["file"] = Path(self.value).name
        return out
