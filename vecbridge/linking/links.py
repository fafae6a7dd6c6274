"""Links: the output of every linking mode, in an open format that ``vecbridge fit`` reads back.

* id links (``ids``, ``field:NAME``, ``pairs:FILE``, ``geh``, ``unsupervised``): ``source_id,target_id,confidence``
  rows, written as CSV (``.csv``) or JSON (``.json``);
* vector anchors (``reembed``, ``reference:FILE``): the new-model side is not a stored record, so the vectors travel
  with the links in a ``.npz`` (``allow_pickle=False``: ids as UTF-8 blobs, vectors as float32).
"""
from __future__ import annotations

import csv
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..secrets import scrub


def _ids_to_blob(ids) -> tuple[np.ndarray, np.ndarray]:
    data = [str(i).encode("utf-8") for i in ids]
    off = np.zeros(len(data) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(b) for b in data])
    return np.frombuffer(b"".join(data), dtype=np.uint8), off


def _blob_to_ids(blob, off) -> list[str]:
    raw = blob.tobytes()
    return [raw[off[i]:off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]


@dataclass
class Links:
    source_ids: list
    target_ids: list
    confidence: np.ndarray
    mode: str
    source_vectors: np.ndarray | None = None
    target_vectors: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.source_ids)

    @property
    def has_vectors(self) -> bool:
        return self.source_vectors is not None and self.target_vectors is not None

    def save(self, path) -> Path:
        path = Path(path)
        suffix = path.suffix.lower()
        if self.has_vectors and suffix != ".npz":
            raise InputError(f"{self.mode} links carry vectors: write them to a .npz file, not {suffix or 'no suffix'}")
        if suffix == ".csv":
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["source_id", "target_id", "confidence"])
            for s, t, c in zip(self.source_ids, self.target_ids, self.confidence):
                w.writerow([s, t, f"{float(c):.6g}"])
            path.write_text(buf.getvalue(), encoding="utf-8")
        elif suffix == ".json":
            path.write_text(json.dumps({"mode": self.mode, "meta": scrub(self.meta), "links": [
                {"source_id": s, "target_id": t, "confidence": float(c)}
                for s, t, c in zip(self.source_ids, self.target_ids, self.confidence)]}, default=str), encoding="utf-8")
        elif suffix == ".npz":
            sb, so = _ids_to_blob(self.source_ids)
            tb, to = _ids_to_blob(self.target_ids)
            arrays = {"source_ids": sb, "source_off": so, "target_ids": tb, "target_off": to,
                      "confidence": np.asarray(self.confidence, dtype=np.float32),
                      "meta": np.frombuffer(json.dumps({"mode": self.mode, **scrub(self.meta)}, default=str).encode(),
                                            np.uint8)}
            if self.has_vectors:
                arrays["source_vectors"] = np.asarray(self.source_vectors, dtype=np.float32)
                arrays["target_vectors"] = np.asarray(self.target_vectors, dtype=np.float32)
            with open(path, "wb") as fh:
                np.savez(fh, **arrays)
        else:
            raise InputError(f"links are written as .csv, .json or .npz, not {suffix or 'no suffix'}")
        return path

    @classmethod
    def load_npz(cls, path) -> "Links":
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(z["meta"].tobytes())
                return cls(_blob_to_ids(z["source_ids"], z["source_off"]),
                           _blob_to_ids(z["target_ids"], z["target_off"]),
                           z["confidence"], meta.pop("mode", "unknown"),
                           z["source_vectors"] if "source_vectors" in z else None,
                           z["target_vectors"] if "target_vectors" in z else None, meta)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(f"{path}: not a vecbridge links file ({exc})") from None
