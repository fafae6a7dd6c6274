"""The alignment artifact: one safe file that the migrator, the wrapper and the checks load and apply.

Format: a safetensors file (no pickle, no code execution on load) holding float64 tensors, with the metadata as
one JSON document in the safetensors header under the key ``vecbridge``. The metadata carries a SHA-256 over the
canonical metadata and every tensor's dtype, shape and bytes, so a truncated, edited or corrupted file is refused
with a clear message instead of silently mapping vectors wrong.

Kinds: ``orthogonal``, ``linear``, ``identity`` (one matrix and two means) and ``clustered``
(:class:`~vecbridge.align.clustered.ClusteredProcrustes`: the same four tensors, ``matrix`` being the global map a
wrapper translates queries with, plus ``centroids``, ``rotations``, ``translations`` and ``cluster_sizes``; the
assignment settings live in the metadata under ``fit.clustered``).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ArtifactError, InputError, StoreError
from ..fs import require_writable
from ..numeric.rowwise import AffineRows, RowStableProducts, exact_offset
from ..vectors import l2_normalize
from .base import LinearAlignment, apply_linear
from .methods import METHODS, kind_of

FORMAT = "vecbridge.alignment"
SCHEMA_VERSION = 1
#: what an artifact may hold: the kinds of the methods table
KINDS = tuple(dict.fromkeys(m.kind for m in METHODS.values()))
NORMALIZATIONS = ("none", "l2")
METRICS = ("cosine", "dot", "l2")


def _digest(meta: dict, tensors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


class Alignment:
    """A fitted map from a source embedding space to a target space, with everything needed to trust it.

    ``transform(X)`` maps source-model vectors (e.g. the stored old vectors) into the target space;
    ``inverse_transform(Q)`` maps target-model vectors (e.g. new-model queries) into the source space, which is
    how an old index is searched without rewriting it. When ``normalization == "l2"`` the inputs of both are
    L2-normalised first, exactly as the pairs were at fit time.
    """

    def __init__(self, tensors: dict[str, np.ndarray], metadata: dict[str, Any]):
        self.tensors = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
        self.metadata = metadata
        self._cast: dict = {}

    # --- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_estimator(cls, estimator: LinearAlignment, *, source_model: str | None = None,
                       target_model: str | None = None, metric: str = "cosine", normalization: str = "none",
                       anchors: dict | None = None, **extra) -> "Alignment":
        """Freeze a fitted estimator with its provenance (model names, metric, normalisation, anchors, fit stats).

        ``extra`` adds metadata keys of the caller's (e.g. ``source={...}``); a key this method sets itself (or
        ``sha256``) is refused, so provenance can never be overwritten by accident."""
        if not hasattr(estimator, "matrix_"):
            raise InputError(f"{type(estimator).__name__} is not fitted yet: call fit() first")
        if metric not in METRICS:
            raise InputError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        if normalization not in NORMALIZATIONS:
            raise InputError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
        kind = kind_of(estimator)
        tensors = {
            "matrix": estimator.matrix_,
            "source_mean": estimator.source_mean_,
            "target_mean": estimator.target_mean_,
            "inverse_matrix": estimator.inverse_matrix_,
        }
        fit = {"n_pairs": estimator.n_pairs_, "residual": getattr(estimator, "residual_", None),
               "estimator": type(estimator).__name__}
        for attr in ("relative_residual_", "delta_", "bound_", "rank_"):
            if hasattr(estimator, attr):
                fit[attr.rstrip("_")] = getattr(estimator, attr)
        if hasattr(estimator, "singular_values_"):
            tensors["singular_values"] = estimator.singular_values_
        if kind == "clustered":
            tensors.update(centroids=estimator.centroids_, rotations=estimator.rotations_,
                           translations=estimator.translations_, cluster_sizes=estimator.cluster_sizes_)
            p = estimator.get_params()
            fit["clustered"] = {"n_clusters": int(estimator.centroids_.shape[0]), "assignment": p["assignment"],
                                "temperature": float(p["temperature"]), "top_m": int(p["top_m"]),
                                "family": p["family"], "shrinkage": float(p["shrinkage"]),
                                "min_cluster_size": int(p["min_cluster_size"]),
                                "fallback_clusters": int(np.sum(estimator.fallback_))}
        meta = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "source_model": source_model,
            "target_model": target_model,
            "source_dim": int(estimator.n_features_in_),
            "target_dim": int(estimator.n_features_out_),
            "metric": metric,
            "normalization": normalization,
            "centered": bool(np.any(estimator.source_mean_) or np.any(estimator.target_mean_)),
            "scale": float(estimator.scale_),
            "is_projection": bool(estimator.n_features_in_ > estimator.n_features_out_
                                  and kind in ("orthogonal", "clustered")),
            "fit": fit,
            "anchors": anchors or {"method": "unspecified"},
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "vecbridge_version": __version__,
        }
        clash = sorted(set(extra) & (set(meta) | {"sha256"}))
        if clash:
            raise InputError(f"Alignment.from_estimator: {', '.join(clash)} {'is a' if len(clash) == 1 else 'are'} "
                             f"reserved metadata key{'s' * (len(clash) > 1)} (set here); reserved: "
                             f"{', '.join(sorted(set(meta) | {'sha256'}))}")
        meta.update(extra)
        return cls(tensors, meta)

    # --- properties ------------------------------------------------------------------------------------------------
    @property
    def source_dim(self) -> int:
        return int(self.metadata["source_dim"])

    @property
    def target_dim(self) -> int:
        return int(self.metadata["target_dim"])

    @property
    def kind(self) -> str:
        return self.metadata["kind"]

    @property
    def fingerprint(self) -> str:
        """A stable identity of the map itself (tensors and the settings that change what it computes)."""
        core = {k: self.metadata[k] for k in ("kind", "source_dim", "target_dim", "normalization", "scale")}
        if self.kind == "clustered":  # how points are assigned to clusters changes what the map computes
            c = self.metadata["fit"]["clustered"]
            core["clustered"] = {k: c[k] for k in ("assignment", "temperature", "top_m")}
        return _digest(core, self.tensors)[:32]

    # --- applying -------------------------------------------------------------------------------------------------
    def _prepare(self, X, dim: int, name: str) -> np.ndarray:
        X = np.asarray(X)
        if X.ndim not in (1, 2) or X.shape[-1] != dim:
            raise InputError(f"{name}: expected vectors of dimension {dim}, got shape {X.shape}")
        if self.metadata["normalization"] == "l2":
            X = l2_normalize(X)
        return X

    def tensor(self, name: str, dtype) -> np.ndarray:
        """One of the artifact's tensors (``matrix``, ``source_mean``, ...) in ``dtype``, converted once and kept."""
        return self._cached((name, np.dtype(dtype).str), lambda: self.tensors[name].astype(dtype))

    def _apply_clustered(self, X, dtype, inverse: bool):
        from .clustered import apply_clustered

        c = self.metadata["fit"]["clustered"]
        mean_in, mean_out = ("target_mean", "source_mean") if inverse else ("source_mean", "target_mean")
        return apply_clustered(X.astype(dtype, copy=False), self.tensor("centroids", dtype),
                               self.tensor("rotations", dtype), self.tensor("translations", dtype),
                               self.tensor(mean_in, dtype), self.tensor(mean_out, dtype),
                               assignment=c["assignment"], temperature=c["temperature"], top_m=c["top_m"],
                               inverse=inverse, global_rotation=self.tensor("matrix", dtype),
                               name="target vectors" if inverse else "source vectors",
                               product=self._cached("products", RowStableProducts))

    def _cached(self, key, build):
        """What is derived from the tensors once (casts, row-stable maps), kept for the artifact's life."""
        if key not in self._cast:
            self._cast[key] = build()
        return self._cast[key]

    def _affine(self, X, inverse: bool) -> np.ndarray:
        """A linear kind's map of float32 rows, each row's bits independent of its batch, the BLAS kernel and the
        machine (:class:`~vecbridge.numeric.rowwise.AffineRows`): what a resumed or distributed migration relies on."""
        def build():
            matrix, mean_in, mean_out = (("inverse_matrix", "target_mean", "source_mean") if inverse
                                         else ("matrix", "source_mean", "target_mean"))
            scale = 1.0 / self.metadata["scale"] if inverse else self.metadata["scale"]
            M = self.tensors[matrix] * scale
            return AffineRows(M, exact_offset(M, self.tensors[mean_in], self.tensors[mean_out]))

        single = X.ndim == 1
        out = self._cached(("affine", inverse), build)(X[None, :] if single else X)
        return out[0] if single else out

    def transform(self, X) -> np.ndarray:
        """Source-model vectors -> target space (float32 in, float32 out; float64 in, float64 out).

        Float32 (and float16) rows map to the same bits whatever batch they arrive in, on any processor."""
        X = self._prepare(X, self.source_dim, "source vectors")
        dtype = np.float64 if X.dtype == np.float64 else np.float32
        if self.kind == "clustered":
            return self._apply_clustered(X, dtype, inverse=False)
        if dtype == np.float32:
            return self._affine(X, inverse=False)
        return apply_linear(X, self.tensor("matrix", dtype), self.tensor("source_mean", dtype),
                            self.tensor("target_mean", dtype), self.metadata["scale"], "source vectors")

    def inverse_transform(self, Q) -> np.ndarray:
        """Target-model vectors (e.g. new-model queries) -> source space."""
        Q = self._prepare(Q, self.target_dim, "target vectors")
        dtype = np.float64 if Q.dtype == np.float64 else np.float32
        if self.kind == "clustered":
            return self._apply_clustered(Q, dtype, inverse=True)
        if dtype == np.float32:
            return self._affine(Q, inverse=True)
        return apply_linear(Q, self.tensor("inverse_matrix", dtype), self.tensor("target_mean", dtype),
                            self.tensor("source_mean", dtype), 1.0 / self.metadata["scale"], "target vectors")

    def __call__(self, batch):
        """Map the ``vector`` column of a batch of records, a dict of arrays such as Ray Data's ``map_batches``
        hands over (``ds.map_batches(alignment)``): the batch with its vectors in the target space, every other
        column as it was.

        Vectors are mapped as float32 (what stores hold), each row to the same bits as a migration maps it."""
        if not isinstance(batch, dict) or "vector" not in batch:
            raise InputError("an alignment maps a batch given as a dict of columns with a 'vector' column (Ray Data's "
                             "batch_format='numpy')")
        vectors = np.asarray(batch["vector"])
        if vectors.dtype == object:   # one array per row
            vectors = np.stack(list(vectors)) if len(vectors) else vectors.reshape(0, self.source_dim)
        return {**batch, "vector": self.map_records(vectors, batch.get("id"))}

    def map_records(self, vectors, ids=None) -> np.ndarray:
        """Stored vectors -> float32 target vectors, as every writer maps them: a NaN or inf vector is refused
        (naming its record's id), and each row's result is independent of the rest of the batch."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.source_dim:
            raise InputError(f"source vectors: expected vectors of dimension {self.source_dim}, got shape "
                             f"{vectors.shape}")
        if len(vectors) == 0:
            return np.zeros((0, self.target_dim), dtype=np.float32)
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            name = f"source record {ids[row]!r}" if ids is not None else f"row {row} of the batch"
            raise InputError(f"{name} has a NaN or inf vector")
        return self.transform(vectors)

    # --- persistence ------------------------------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write atomically (temporary file + rename): a crash never leaves a half-written artifact at ``path``."""
        from safetensors import SafetensorError
        from safetensors.numpy import save_file

        from ..secrets import scrub

        path = Path(path)
        meta = scrub(dict(self.metadata))   # no URL's password, no secret-named value, is ever kept in the file
        meta["sha256"] = _digest(meta, self.tensors)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        require_writable(path, f"the alignment {path.name}")   # one line (exit 4), not the writer's own error
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            save_file({k: np.ascontiguousarray(v) for k, v in self.tensors.items()}, str(tmp),
                      metadata={"vecbridge": json.dumps(meta, sort_keys=True)})
            os.replace(tmp, path)
        except SafetensorError as exc:   # its own I/O errors: one line, as an OSError of ours would be
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise StoreError(f"cannot write the alignment {path}: {reason}") from None
        finally:
            if tmp.exists():
                tmp.unlink()
        self.metadata = meta
        return path

    @classmethod
    def load(cls, path) -> "Alignment":
        """Load and verify: format, schema version, checksum, shapes. Any problem is an :class:`ArtifactError`."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"alignment file not found: {path}")
        try:
            with safe_open(str(path), framework="np") as fh:
                header = fh.metadata() or {}
                tensors = {name: fh.get_tensor(name) for name in fh.keys()}
        except Exception as exc:  # safetensors raises several types for truncated/corrupt headers
            reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            raise ArtifactError(f"{path} is not a readable vecbridge alignment (truncated or corrupt: {reason})"
                                ) from None
        try:
            meta = json.loads(header["vecbridge"])
        except (KeyError, ValueError):
            raise ArtifactError(f"{path} is a safetensors file but not a vecbridge alignment (no vecbridge "
                                f"metadata)") from None
        if not isinstance(meta, dict):
            raise ArtifactError(f"{path}: the vecbridge metadata is a JSON {type(meta).__name__}, not an object")
        if meta.get("format") != FORMAT:
            raise ArtifactError(f"{path}: unknown format {meta.get('format')!r}")
        version = meta.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ArtifactError(f"{path}: alignment schema version {version!r} is not supported by vecbridge "
                                f"{__version__} (supports {SCHEMA_VERSION}); refit or upgrade vecbridge")
        if meta.get("sha256") != _digest(meta, tensors):
            raise ArtifactError(f"{path}: checksum mismatch, the file was modified or corrupted after it was written")
        alignment = cls(tensors, meta)
        alignment._validate(path)
        return alignment

    def _validate(self, path):
        """The values, not only the checksum: a file edited with its checksum recomputed must still describe a map
        that can be applied (known settings, positive dimensions and scale, finite tensors of matching shapes)."""
        meta = self.metadata

        def bad(what: str):
            raise ArtifactError(f"{path}: {what}; refit it, or restore the file that was saved")

        def number(value, *, integer: bool = False) -> bool:
            types = (int,) if integer else (int, float)
            return isinstance(value, types) and not isinstance(value, bool) and bool(np.isfinite(value))

        for key in ("source_dim", "target_dim"):
            if not number(meta.get(key), integer=True) or meta[key] <= 0:
                bad(f"{key} must be a positive integer, got {meta.get(key)!r}")
        if meta.get("kind") not in KINDS:
            bad(f"unknown alignment kind {meta.get('kind')!r} (known: {', '.join(KINDS)})")
        if meta.get("normalization") not in NORMALIZATIONS:
            bad(f"unknown normalization {meta.get('normalization')!r} (known: {', '.join(NORMALIZATIONS)})")
        if meta.get("metric") not in METRICS:
            bad(f"unknown metric {meta.get('metric')!r} (known: {', '.join(METRICS)})")
        if not number(meta.get("scale")) or meta["scale"] <= 0:
            bad(f"scale must be a positive finite number, got {meta.get('scale')!r}")
        for key in ("fit", "anchors"):
            if not isinstance(meta.get(key, {}), dict):
                bad(f"{key} must be a JSON object, got {type(meta[key]).__name__}")
        for key in ("centered", "is_projection"):
            if not isinstance(meta.get(key, False), bool):
                bad(f"{key} must be true or false, got {meta[key]!r}")
        d_in, d_out = self.source_dim, self.target_dim
        expected = {"matrix": (d_in, d_out), "inverse_matrix": (d_out, d_in), "source_mean": (d_in,),
                    "target_mean": (d_out,)}
        if self.kind == "clustered":
            c = (meta.get("fit") or {}).get("clustered")
            if not isinstance(c, dict) or c.get("assignment") not in ("soft", "hard"):
                bad("clustered alignment without its assignment settings")
            k = c.get("n_clusters")
            if not number(k, integer=True) or k <= 0:
                bad(f"clustered n_clusters must be a positive integer, got {k!r}")
            if not number(c.get("temperature")) or c["temperature"] <= 0:
                bad(f"clustered temperature must be a positive finite number, got {c.get('temperature')!r}")
            if not number(c.get("top_m"), integer=True) or c["top_m"] <= 0:
                bad(f"clustered top_m must be a positive integer, got {c.get('top_m')!r}")
            expected.update(centroids=(k, d_in), rotations=(k, d_in, d_out), translations=(k, d_out))
        for name, shape in expected.items():
            if name not in self.tensors or self.tensors[name].shape != shape:
                got = self.tensors[name].shape if name in self.tensors else "missing"
                bad(f"tensor {name!r} must have shape {shape} for {d_in}d -> {d_out}d, got {got}")
        for name, tensor in self.tensors.items():
            if not np.isfinite(tensor).all():
                bad(f"tensor {name!r} holds NaN or inf values")

    def summary(self) -> dict:
        """The metadata a report shows (no tensors; of each side's space fingerprint, its identity, not its
        vectors)."""
        out = {k: v for k, v in self.metadata.items() if k != "sha256"}
        if isinstance(out.get("spaces"), dict):
            out["spaces"] = {k: ({f: x for f, x in v.items() if f not in ("mean", "sketch")} if isinstance(v, dict)
                                 else v) for k, v in out["spaces"].items()}
        return out

    def __repr__(self) -> str:
        m = self.metadata
        return (f"Alignment({m['kind']}, {m.get('source_model') or '?'} ({m['source_dim']}d) -> "
                f"{m.get('target_model') or '?'} ({m['target_dim']}d), pairs={m['fit'].get('n_pairs')})")
