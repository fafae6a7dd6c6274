"""``file://`` store: a directory of append-only numpy segments (no server needed).

Layout of a vecbridge directory::

    DIR/manifest.json              {"format": "vecbridge.file", "version": 2, "dim": ..., "metric": ...}
                                   (and the collection's stamp, if it has one, under "vecbridge:stamp")
    DIR/segments/000001.npy        float32 vectors of one upsert
    DIR/segments/000001.meta.npz   ids of the same rows, their payloads as one UTF-8 JSON array and, where the
                                   upsert had them, the rows' record stamps in columns ("stamps": the fields all
                                   rows share as one JSON object, each other field one array, packed as one)
                                   (loaded with allow_pickle=False)

Version 1 directories (record stamps inside each payload) are read and written as they are; a new directory is
version 2, which a version 1 reader refuses rather than reading it without its stamps.

Each upsert writes one segment under a number it claims exclusively (several processes may append at once, e.g.
the tasks of a distributed migration): vectors first, then the ``.meta.npz`` that commits it, both via temporary file +
rename, so a crash leaves either a whole segment or none (a writer killed before its rename leaves a
``.NAME.tmp-PID`` file, which the next handle to write removes once that process no longer runs). Reading merges
segments in order, later rows replacing earlier rows with the same id, which makes upserts idempotent. Vectors are
memory-mapped, so scanning a large directory does not load it.

Read-only plain layouts are accepted too, for vectors a user already has: a ``.npy`` file (ids are row numbers), or
a directory with ``vectors.npy`` and optionally ``ids.json`` (a JSON list) and ``payloads.jsonl`` (one object per
line); ``?payloads=PATH`` names a JSONL file for a bare ``.npy``. URL forms: ``file:///abs/dir``, ``file://./rel``
(percent-encoded: ``file:///tmp/my%20dir`` is ``/tmp/my dir``), or a bare path (taken as it is written).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import unquote

import numpy as np

from ..errors import InputError, NotFound, StoreError
from ..fs import require_writable
from .base import (
    Capabilities,
    Collection,
    CollectionIdentity,
    CollectionInfo,
    KeyRange,
    VectorBatch,
    first_duplicate,
    first_line,
    quantile_positions,
    ranges_from_bounds,
    record_stamp_columns,
    stamp_key,
    stamps_from_payloads,
    stamps_into_payloads,
)
from .url import known_params, resolved_path

#: the URL query options this store knows (any other is refused)
OPTIONS = ("payloads", "metric")
FORMAT = "vecbridge.file"
#: the version of new directories: 2 keeps record stamps in columns of each segment, 1 in each record's payload
VERSION = 2
VERSIONS = (1, 2)
#: a search keeps the live records' vectors, prepared for the metric, between calls up to this size (a collection
#: larger than this is read block by block at every search, as before)
SEARCH_CACHE_BYTES = 256 * 2**20
#: records a search scores at once
SEARCH_BLOCK = 100_000
_SEG = re.compile(r"^(\d{6,})\.meta\.npz$")


def _encode_strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    joined = "".join(values)
    if joined.isascii():   # a character is a byte: no encoding one by one
        offsets[1:] = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8), offsets
    data = [v.encode("utf-8") for v in values]
    offsets[1:] = np.cumsum([len(b) for b in data])
    return np.frombuffer(b"".join(data), dtype=np.uint8), offsets


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8)


def _stamp_arrays(stamps) -> dict[str, np.ndarray]:
    """A segment's record stamps as arrays (checked first: a bad stamp writes nothing), packed by :func:`_pack` into
    the ``stamps`` member of its ``.meta.npz``:
    ``stamp_shared`` (the fields every stamped row shares, JSON), ``stamp_columns`` (the other fields' names and
    kinds, JSON), ``stamp_has`` (which rows have a stamp, where not all do) and per column ``stamp_J`` (floats, JSON,
    or UTF-8 texts with ``stamp_J_off`` offsets and ``stamp_J_none`` where a row has no such field)."""
    cols, has, kinds = record_stamp_columns(stamps)
    out = {} if has is None else {"stamp_has": has}
    if cols is None:
        return {**out, "stamp_shared": _utf8("{}"), "stamp_columns": _utf8("[]")}
    for j, (name, values) in enumerate(cols.columns.items()):
        kind = kinds[name]
        if kind == "str":
            if None in values:
                out[f"stamp_{j}_none"] = np.fromiter((v is None for v in values), bool, len(values))
                values = ["" if v is None else v for v in values]
            out[f"stamp_{j}"], out[f"stamp_{j}_off"] = _encode_strings(values)
        elif kind == "float":
            out[f"stamp_{j}"] = np.asarray(values, dtype=np.float64)   # None: NaN (a stamp's floats are finite)
        else:
            out[f"stamp_{j}"] = _utf8(json.dumps(values, ensure_ascii=False))
    out["stamp_shared"] = _utf8(json.dumps(cols.shared, ensure_ascii=False))
    out["stamp_columns"] = _utf8(json.dumps([[name, kinds[name]] for name in cols.columns], ensure_ascii=False))
    return out


def _pack(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Several 1-D arrays as one: an 8-byte length, a JSON index (name -> dtype, byte offset, count), the arrays'
    bytes. A segment's stamps are one member of its ``.npz``: each member is a zip entry, which cost more than a
    small write's stamps themselves."""
    index, chunks, at = {}, [], 0
    for key, a in arrays.items():
        a = np.ascontiguousarray(a).reshape(-1)
        index[key] = [a.dtype.str, at, len(a)]
        chunks.append(a.tobytes())
        at += a.nbytes
    head = json.dumps(index).encode()
    return np.frombuffer(len(head).to_bytes(8, "little") + head + b"".join(chunks), np.uint8)


def _unpack(blob: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays :func:`_pack` packed (views of one buffer; numbers, booleans and bytes only)."""
    raw = blob.tobytes()
    size = int.from_bytes(raw[:8], "little")
    index = json.loads(raw[8:8 + size])
    base = 8 + size
    out = {}
    for key, (dtype, at, count) in index.items():
        dt = np.dtype(dtype)
        if dt.kind not in "biufS":
            raise ValueError(f"{key} is not an array of numbers")
        out[key] = np.frombuffer(raw, dtype=dt, count=count, offset=base + at)
    return out


def _stamp_columns_of(arrays: dict, n: int, name: str) -> tuple[np.ndarray, dict, dict]:
    """The stamps kept by :func:`_stamp_arrays`: (which rows have one, shared fields, name -> list of values)."""
    try:
        arrays = _unpack(arrays)
        shared = json.loads(arrays["stamp_shared"].tobytes())
        kinds = json.loads(arrays["stamp_columns"].tobytes())
        has = arrays["stamp_has"] if "stamp_has" in arrays else np.ones(n, bool)
        k = int(has.sum())
        columns = {}
        for j, (field, kind) in enumerate(kinds):
            data = arrays[f"stamp_{j}"]
            if kind == "str":
                values = _decode_strings(data, arrays[f"stamp_{j}_off"])
                if f"stamp_{j}_none" in arrays:
                    values = [None if none else v for v, none in zip(values, arrays[f"stamp_{j}_none"].tolist())]
            elif kind == "float":
                values = [None if v != v else v for v in data.tolist()]
            else:
                values = json.loads(data.tobytes())
            if len(values) != k:
                raise ValueError(f"stamp column {field!r} holds {len(values)} values for {k} stamped rows")
            columns[field] = values
        if not isinstance(shared, dict) or len(has) != n:
            raise ValueError("its stamps do not match its rows")
    except (KeyError, ValueError, TypeError, UnicodeDecodeError, IndexError) as exc:
        raise StoreError(f"segment {name} is damaged: its record stamps are unreadable ({first_line(exc)})") from None
    return has, shared, columns


def _decode_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = blob.tobytes()
    return [raw[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]


def _atomic_write(path: Path, write) -> None:
    """Write a file through ``write(fh)`` into a temporary file renamed over ``path``: whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


_TMP = re.compile(r"^\..+\.tmp-(\d+)$")


def _pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (one we may not signal runs too)."""
    if pid <= 0:
        return True  # not a real writer's id: leave its file alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _remove_stale_temporaries(*dirs: Path) -> None:
    """Remove the ``.NAME.tmp-PID`` files of :func:`_atomic_write` whose writer no longer runs (killed before its
    rename, e.g. by SIGKILL, which skips the ``finally``); a running writer's temporaries are left alone."""
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            m = _TMP.match(name)
            if m and not _pid_alive(int(m.group(1))):
                try:
                    os.unlink(d / name)
                except OSError:
                    pass  # gone already, or a read-only directory: the write itself will say so


def _by_segment(seg_idx: np.ndarray):
    """``(segment, positions)`` for each segment among ``seg_idx``: reads go one segment at a time."""
    for s in np.unique(seg_idx):
        yield int(s), np.flatnonzero(seg_idx == s)


def _claim_segment(seg_dir: Path, first: int) -> str:
    """The first free segment number from ``first``, claimed by creating its vectors file exclusively: writers in
    other processes or on other nodes (a distributed migration) each get a name of their own, without a lock. A
    claim whose writer died before its commit is a vectors file without metadata, which readers ignore."""
    n = first
    while True:
        name = f"{n:06d}"
        try:
            os.close(os.open(seg_dir / f"{name}.npy", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return name
        except FileExistsError:
            n += 1


class _Segment:
    """One committed segment: ids, memory-mapped vectors, payloads and record stamps decoded on demand."""

    def __init__(self, ids: list, vectors: np.ndarray, payload_json: np.ndarray | None = None,
                 payload_list: list | None = None, name: str = "", stamp_arrays: dict | None = None):
        self.ids = ids
        self.vectors = vectors
        self.name = name
        self._json, self._list = payload_json, payload_list
        #: whether the segment keeps its rows' stamps in columns (else in their payloads, where they have one)
        self.stamped = stamp_arrays is not None
        self._stamp_arrays, self._stamp_table = stamp_arrays, None

    def _stamps_decoded(self) -> tuple[np.ndarray, dict, list]:
        """(each row's position among the stamped rows, -1 for none; shared fields; (name, values) per column)."""
        if self._stamp_table is None:
            has, shared, columns = _stamp_columns_of(self._stamp_arrays, len(self.ids), self.name)
            pos = np.cumsum(has) - 1
            pos[~has] = -1
            self._stamp_table, self._stamp_arrays = (pos, shared, list(columns.items())), None
        return self._stamp_table

    def stamps(self, rows: np.ndarray) -> list[dict | None]:
        """The stamps of these rows (None where a row has none): from the columns of a :attr:`stamped` segment, else
        from the rows' payloads."""
        if not self.stamped:
            return stamps_from_payloads(self.payloads(rows))[1]
        pos, shared, columns = self._stamps_decoded()
        out = []
        for p in pos[rows].tolist():
            if p < 0:
                out.append(None)
                continue
            stamp = dict(shared)
            for k, values in columns:
                if values[p] is not None:
                    stamp[k] = values[p]
            out.append(stamp)
        return out

    def origins(self, rows: np.ndarray) -> list[str | None]:
        """The stamps' origins of these rows of a :attr:`stamped` segment, without making the stamps."""
        pos, shared, columns = self._stamps_decoded()
        column = dict(columns).get("origin")
        origin = shared.get("origin")
        return [None if p < 0 else origin if column is None else column[p] for p in pos[rows].tolist()]

    def payloads(self, rows: np.ndarray) -> list[dict]:
        if self._list is None:
            # one json.loads per segment (C speed), on first use only
            try:
                self._list = json.loads(self._json.tobytes()) if self._json is not None else [{}] * len(self.ids)
            except (UnicodeDecodeError, ValueError) as exc:
                raise StoreError(f"segment {self.name} is damaged: its payloads are not UTF-8 JSON ({exc})") from None
            if not isinstance(self._list, list) or len(self._list) != len(self.ids):
                raise StoreError(f"segment {self.name} is damaged: it does not hold one payload per record")
            self._json = None
        return [dict(self._list[r]) for r in rows]   # copies: callers may edit what they get


class FileCollection(Collection):
    scheme = "file"
    capabilities = Capabilities(key_ranges=True, stamp="the collection's manifest.json",
                                record_stamps="columns beside each segment's payloads (in each record's payload in a "
                                              "version 1 directory)")
    #: whether this handle has removed the temporaries that killed writers left (once, before its first write)
    _swept = False

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        is_url = url.lower().startswith("file://")
        raw = url[len("file://"):] if is_url else url
        path, _, _ = raw.partition("?")
        self.path = Path(unquote(path) if is_url else path).expanduser()  # a URL's %20 is a space; a bare path as is
        self.params = known_params(url, OPTIONS, "file")
        self._cache_key = None
        self._searched = None   # (live segments, live rows, metric, blocks) of the last search: _search_blocks
        self._plain = self.path.suffix == ".npy" or (self.path / "vectors.npy").is_file()
        if self._plain:
            self.read_only = True

    @property
    def identity(self) -> CollectionIdentity:
        return CollectionIdentity("file", resolved_path(self.path))

    @property
    def local_path(self) -> str:
        return resolved_path(self.path)

    def check_writable(self) -> None:
        require_writable(self.path, "the collection")

    # --- layout -----------------------------------------------------------------------------------------------------
    @property
    def _manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def exists(self) -> bool:
        return self._manifest_path.is_file() or (self._plain and (self.path.is_file() or self.path.is_dir()))

    def _manifest(self) -> dict:
        if self._plain:
            seg = self._segments()[0] if self._segments() else None
            dim = int(seg.vectors.shape[1]) if seg is not None else 0
            return {"format": FORMAT, "version": VERSION, "dim": dim, "metric": self.params.get("metric", "cosine")}
        if not self._manifest_path.is_file():
            raise NotFound(f"collection not found: {self.display_url} (no {self._manifest_path.name}; "
                           f"create it first, or check the path)")
        try:
            manifest = json.loads(self._manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.display_url}: unreadable manifest ({exc})") from None
        if manifest.get("format") != FORMAT or manifest.get("version") not in VERSIONS:
            raise StoreError(f"{self.display_url}: not a vecbridge file collection of a version this vecbridge reads "
                             f"({', '.join(map(str, VERSIONS))})")
        return manifest

    def _segment_names(self) -> list[str]:
        seg_dir = self.path / "segments"
        if not seg_dir.is_dir():
            return []
        return sorted((m.group(1) for m in map(_SEG.match, os.listdir(seg_dir)) if m), key=int)

    def _load_plain(self) -> list[_Segment]:
        vec_path = self.path if self.path.suffix == ".npy" else self.path / "vectors.npy"
        if not vec_path.is_file():
            raise NotFound(f"collection not found: {self.display_url}")
        try:
            vectors = np.load(vec_path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.display_url}: cannot read {vec_path.name} ({exc})") from None
        if vectors.ndim != 2:
            raise StoreError(f"{self.display_url}: {vec_path.name} is not a 2-D array of vectors")
        ids_path = self.path / "ids.json"
        ids = self._plain_ids(ids_path) if ids_path.is_file() else list(range(vectors.shape[0]))
        payload_path = self.params.get("payloads") or (self.path / "payloads.jsonl" if self.path.is_dir() else None)
        payloads = None
        if payload_path and Path(payload_path).is_file():
            payloads = self._plain_payloads(Path(payload_path))
        if len(ids) != vectors.shape[0] or (payloads is not None and len(payloads) != vectors.shape[0]):
            raise InputError(f"{self.display_url}: ids/payloads do not have one entry per vector row "
                             f"({vectors.shape[0]:,} vectors, {len(ids):,} ids"
                             + (f", {len(payloads):,} payloads)" if payloads is not None else ")"))
        return [_Segment(ids, vectors, payload_list=payloads)]

    def _plain_ids(self, path: Path) -> list:
        """``ids.json`` of a plain layout, checked before any job creates anything: a JSON list of distinct strings
        or integers (a truncated file, an id that is a list or a duplicate would otherwise surface mid-run)."""
        try:
            ids = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{self.display_url}: {path.name} is not a readable JSON list of ids ({exc})") from None
        if not isinstance(ids, list):
            raise InputError(f"{self.display_url}: {path.name} must hold a JSON list of ids")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (str, int)):
                raise InputError(f"{self.display_url}: {path.name}: id {i!r} is not a string or an integer")
        dup = first_duplicate(ids)
        if dup is not None:
            raise InputError(f"{self.display_url}: duplicate id {dup!r} in the source ({path.name})")
        return ids

    def _plain_payloads(self, path: Path) -> list[dict]:
        """A plain layout's JSONL payloads, one JSON object per line, checked as :meth:`_plain_ids` is."""
        payloads = []
        try:
            with open(path, "rb") as fh:
                for n, raw in enumerate(fh, 1):
                    if not raw.strip():
                        continue
                    try:
                        payload = json.loads(raw.decode("utf-8"))
                    except (UnicodeDecodeError, ValueError) as exc:
                        raise InputError(f"{self.display_url}: {path.name} line {n} is not valid UTF-8 JSON "
                                         f"({exc})") from None
                    if not isinstance(payload, dict):
                        raise InputError(f"{self.display_url}: {path.name} line {n} is not a JSON object")
                    payloads.append(payload)
        except OSError as exc:
            raise StoreError(f"{self.display_url}: cannot read {path.name} ({exc.strerror or exc})") from None
        return payloads

    def _segments(self) -> list[_Segment]:
        if self._plain:
            if self._cache_key != "plain":
                self._segs, self._cache_key = self._load_plain(), "plain"
            return self._segs
        key = self._segment_files()
        if self._cache_key == key:
            return self._segs
        had = self._cache_key if isinstance(self._cache_key, list) else None
        if had and key[:len(had)] == had:   # segments only added since (each write adds one): read those alone
            self._segs = self._segs + [self._load_segment(name) for name, *_ in key[len(had):]]
            self._extend_index(len(had))
        else:
            self._segs = [self._load_segment(name) for name, *_ in key]
            self._build_index()
        self._cache_key, self._seg_names = key, [name for name, *_ in key]
        return self._segs

    def _segment_files(self) -> list[tuple]:
        """``(name, inode, mtime, size)`` of each committed segment's metadata, in order: a segment removed, or one
        written again under a name a delete freed, changes this even where the names alone would not."""
        seg_dir = self.path / "segments"
        try:
            entries = [(m.group(1), e) for e in os.scandir(seg_dir) for m in [_SEG.match(e.name)] if m]
        except FileNotFoundError:
            return []
        out = []
        for name, entry in sorted(entries, key=lambda x: int(x[0])):
            try:
                st = entry.stat()
            except FileNotFoundError:   # removed meanwhile (a delete): not a segment any more
                continue
            out.append((name, st.st_ino, st.st_mtime_ns, st.st_size))
        return out

    def _load_segment(self, name: str) -> _Segment:
        seg_dir = self.path / "segments"
        try:
            with np.load(seg_dir / f"{name}.meta.npz", allow_pickle=False) as meta:
                ids = (meta["ids_int"].tolist() if "ids_int" in meta
                       else _decode_strings(meta["ids_utf8"], meta["ids_off"]))
                payload_json = meta["payloads_json"]
                stamps = meta["stamps"] if "stamps" in meta.files else None
            vectors = np.load(seg_dir / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:   # damaged or cut short
            raise StoreError(f"{self.display_url}: segment {name} is unreadable ({first_line(exc)})") from None
        return _Segment(ids, vectors, payload_json, name=f"{self.path / 'segments' / name}", stamp_arrays=stamps)

    def _build_index(self) -> None:
        """id -> (segment, row) for the live record of every id; live rows sorted in (segment, row) order."""
        where: dict[Any, tuple[int, int]] = {}
        for s, seg in enumerate(self._segs):
            for r, i in enumerate(seg.ids):
                where[i] = (s, r)
        self._where = where
        order = sorted(where.values())
        self._live_seg = np.array([s for s, _ in order], dtype=np.int64)
        self._live_row = np.array([r for _, r in order], dtype=np.int64)

    def _extend_index(self, first: int) -> None:
        """:meth:`_build_index` after segments ``first``.. were added: their rows become live (the last of an id
        wins), the rows of earlier segments they replace are dropped; the work is the new rows', not the
        collection's (a million-record collection re-indexed whole after every write made syncing it quadratic)."""
        where = self._where
        replaced = []
        for s in range(first, len(self._segs)):
            for r, i in enumerate(self._segs[s].ids):
                before = where.get(i)
                if before is not None and before[0] < first:
                    replaced.append(before[0] * (1 << 40) + before[1])
                where[i] = (s, r)
        keep = slice(None)
        if replaced:
            keep = ~np.isin(self._live_seg * (1 << 40) + self._live_row, np.asarray(replaced, dtype=np.int64))
        new = [(s, r) for s in range(first, len(self._segs)) for r, i in enumerate(self._segs[s].ids)
               if where[i] == (s, r)]
        self._live_seg = np.concatenate([self._live_seg[keep], np.array([s for s, _ in new], dtype=np.int64)])
        self._live_row = np.concatenate([self._live_row[keep], np.array([r for _, r in new], dtype=np.int64)])

    def _live(self) -> tuple[np.ndarray, np.ndarray]:
        segs = self._segments()
        if self._plain:
            n = segs[0].vectors.shape[0]
            return np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
        return self._live_seg, self._live_row

    def _ids_and_vectors(self, seg_idx: np.ndarray, rows: np.ndarray, dim: int) -> tuple[list, np.ndarray]:
        """The ids and vectors at (segment, row) positions, in the order given; one pass per segment involved."""
        segs = self._segs
        vectors = np.empty((len(rows), dim), dtype=np.float32)
        ids: list = [None] * len(rows)
        for s, pos in _by_segment(seg_idx):
            r = rows[pos]
            vectors[pos] = segs[s].vectors[r]
            seg_ids = segs[s].ids
            for p, row in zip(pos.tolist(), r.tolist()):
                ids[p] = seg_ids[row]
        return ids, vectors

    def _gather(self, seg_idx: np.ndarray, rows: np.ndarray) -> VectorBatch:
        """Records at (segment, row) positions, in the order given, whole: ids, vectors, payloads and stamps."""
        segs = self._segments()
        ids, vectors = self._ids_and_vectors(seg_idx, rows, self._manifest()["dim"])
        payloads: list = [None] * len(rows)
        columns: dict[int, dict | None] = {}   # position -> stamp, for rows of segments that keep them in columns
        for s, pos in _by_segment(seg_idx):
            r = rows[pos]
            for p, pay in zip(pos.tolist(), segs[s].payloads(r)):
                payloads[p] = pay
            if segs[s].stamped:
                columns.update(zip(pos.tolist(), segs[s].stamps(r)))
        payloads, stamps = stamps_from_payloads(payloads)   # a stamped segment's payloads lose stray stamp keys too
        for p, stamp in columns.items():
            stamps[p] = stamp
        return VectorBatch(ids, vectors, payloads, stamps=stamps)

    # --- protocol: reading --------------------------------------------------------------------------------------------
    def info(self) -> CollectionInfo:
        manifest = self._manifest()
        count = len(self._live()[0])
        return CollectionInfo(name=self.path.name, dim=int(manifest["dim"]), metric=manifest["metric"], count=count,
                              vector_fields={"": (int(manifest["dim"]), manifest["metric"])})

    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        self._manifest()
        seg_idx, rows = self._live()
        count = len(rows)
        if n <= 0:
            raise InputError("sample size must be positive")
        pick = np.sort(np.random.default_rng(seed).choice(count, size=min(n, count), replace=False))
        return self._gather(seg_idx[pick], rows[pick])

    def _cursor_key(self, cursor: Any) -> int:
        try:
            s, r = int(cursor[0]), int(cursor[1])
        except (TypeError, ValueError, IndexError):
            raise InputError(f"invalid scan cursor {cursor!r} for a file collection") from None
        return s * (1 << 40) + r

    def scan(self, batch_size: int = 1000, after: Any = None, until: Any = None) -> Iterator[VectorBatch]:
        """Live records in (segment, row) order; a cursor is the ``[segment, row]`` of a batch's last record."""
        self._manifest()
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        seg_idx, rows = self._live()
        key = seg_idx * (1 << 40) + rows
        start = 0 if after is None else int(np.searchsorted(key, self._cursor_key(after), side="right"))
        stop = len(rows) if until is None else int(np.searchsorted(key, self._cursor_key(until), side="right"))
        for lo in range(start, stop, batch_size):
            hi = min(lo + batch_size, stop)
            batch = self._gather(seg_idx[lo:hi], rows[lo:hi])
            batch.cursor = [int(seg_idx[hi - 1]), int(rows[hi - 1])]
            yield batch

    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """The stamps alone, segment by segment: the origins are read from the stamp columns and only the matching
        rows' stamps are made (no vectors read; payloads only in segments that keep their stamps there)."""
        self._manifest()
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        wanted = None if origins is None else set(origins)
        seg_idx, rows = self._live()
        segs = self._segments()
        ids, stamps = [], []
        bounds = np.flatnonzero(np.diff(seg_idx)) + 1
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(rows)]):
            if lo == hi:
                continue
            seg, r = segs[int(seg_idx[lo])], rows[lo:hi]
            if seg.stamped:   # the origins first: only the matching rows' stamps are made
                r = r[[o is not None and (wanted is None or o in wanted) for o in seg.origins(r)]]
            got = ((seg.ids[i], st) for i, st in zip(r.tolist(), seg.stamps(r))
                   if st is not None and (wanted is None or st["origin"] in wanted))
            for i, st in got:
                ids.append(i)
                stamps.append(st)
                if len(ids) == batch_size:
                    yield ids, stamps
                    ids, stamps = [], []
        if ids:
            yield ids, stamps

    def stamps_of(self, ids: Sequence) -> dict:
        """The stamps alone, from the stamp columns (no vectors read; payloads only in segments that keep their
        stamps there)."""
        self._manifest()
        segs, where = self._segments(), self._positions()
        by_seg: dict[int, list] = {}
        for i in ids:
            if i in where:
                s, r = where[i]
                by_seg.setdefault(s, []).append(r)
        out = {}
        for s, rows in by_seg.items():
            found = segs[s].stamps(np.asarray(rows, dtype=np.int64))
            out.update((segs[s].ids[row], st) for row, st in zip(rows, found) if st is not None)
        return out

    def _positions(self) -> dict:
        """id -> (segment, row) of every live record."""
        segs = self._segments()
        if self._plain:
            return {i: (0, r) for r, i in enumerate(segs[0].ids)} if segs else {}
        return self._where

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """Cut at exact quantiles of the live (segment, row) positions: the index holds them all already, so no
        sample is needed (``seed`` is accepted for the protocol and unused)."""
        self._manifest()
        seg_idx, rows = self._live()
        return ranges_from_bounds([[int(seg_idx[p]), int(rows[p])] for p in quantile_positions(len(rows), n)])

    def get(self, ids: Sequence) -> VectorBatch:
        self._manifest()
        where = self._positions()
        found = [where[i] for i in ids if i in where]
        seg_idx = np.array([s for s, _ in found], dtype=np.int64)
        rows = np.array([r for _, r in found], dtype=np.int64)
        if not found:
            return VectorBatch([], np.zeros((0, self._manifest()["dim"]), dtype=np.float32), [])
        return self._gather(seg_idx, rows)

    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        """Exact search (brute force, block by block) with the collection's metric."""
        from ..metrics import prepare_vectors, score_block
        from ..numeric.ranking import top_k_rows

        info = self.info()
        Q = np.asarray(vectors, dtype=np.float32)
        if Q.ndim != 2 or Q.shape[1] != info.dim:
            raise InputError(f"query vectors must have dimension {info.dim}, got shape {Q.shape}")
        Q = prepare_vectors(Q, info.metric)
        ids: list = []
        best_s = np.zeros((len(Q), 0), dtype=np.float32)
        best_i = np.zeros((len(Q), 0), dtype=np.int64)
        for block_ids, D, d_sq in self._search_blocks(info.metric, info.dim):
            idx, sc = top_k_rows(score_block(Q, D, info.metric, d_sq), min(k, len(block_ids)))
            cat_s, cat_i = np.concatenate([best_s, sc], 1), np.concatenate([best_i, idx + len(ids)], 1)
            order = np.argsort(-cat_s, axis=1, kind="stable")[:, :k]
            best_s, best_i = np.take_along_axis(cat_s, order, 1), np.take_along_axis(cat_i, order, 1)
            ids.extend(block_ids)
        return [[ids[j] for j in row] for row in best_i], best_s

    def _search_blocks(self, metric: str, dim: int):
        """``(ids, vectors, squared norms or None)`` of the live records, :data:`SEARCH_BLOCK` at a time, the vectors
        prepared for ``metric``: what a search reads (no payloads, no stamps). Kept for the next search while the
        records are the same (any write or delete, here or by another process, makes new live arrays) and the
        collection is at most :data:`SEARCH_CACHE_BYTES`."""
        from ..metrics import prepare_vectors

        seg_idx, rows = self._live()
        kept = self._searched
        if kept is not None and kept[0] is seg_idx and kept[1] is rows and kept[2] == metric:
            return kept[3]

        def blocks():
            for lo in range(0, len(rows), SEARCH_BLOCK):
                ids, V = self._ids_and_vectors(seg_idx[lo:lo + SEARCH_BLOCK], rows[lo:lo + SEARCH_BLOCK], dim)
                D = prepare_vectors(V, metric)
                yield ids, D, np.einsum("ij,ij->i", D, D) if metric == "l2" else None

        if len(rows) * dim * 4 > SEARCH_CACHE_BYTES:
            return blocks()
        out = list(blocks())
        self._searched = (seg_idx, rows, metric, out)
        return out

    # --- stamp: in the manifest ---------------------------------------------------------------------------------------
    def _load_stamp(self) -> str | None:
        if self._plain or not self._manifest_path.is_file():
            return None
        stamp = self._manifest().get(stamp_key(None))
        return None if stamp is None else json.dumps(stamp)

    def _save_stamp(self, text: str) -> None:
        manifest = self._manifest()
        manifest[stamp_key(None)] = json.loads(text)
        try:
            _atomic_write(self._manifest_path, lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
        except OSError as exc:
            raise StoreError(f"{self.display_url}: cannot write the stamp into {self._manifest_path.name} "
                             f"({exc.strerror or exc})") from None

    # --- protocol: writing --------------------------------------------------------------------------------------------
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "FileCollection":
        dim, metric = self._check_create_args(dim, metric)
        if self._manifest_path.is_file():
            manifest = self._manifest()
            self._check_existing(dim, metric, manifest["dim"], manifest["metric"], exist_ok=exist_ok)
            return self
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise StoreError(f"{self.path} exists and is not an empty directory; refusing to write into it")
        (self.path / "segments").mkdir(parents=True, exist_ok=True)
        manifest = {"format": FORMAT, "version": VERSION, "dim": int(dim), "metric": metric}
        _atomic_write(self._manifest_path, lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
        return self

    def upsert(self, batch: VectorBatch) -> int:
        self._writable()
        manifest = self._manifest()
        vectors = self._check_batch(batch, manifest["dim"])
        if len(batch) == 0:
            return 0
        if not self._swept:
            _remove_stale_temporaries(self.path, self.path / "segments")
            self._swept = True
        in_columns = batch.stamps is not None and manifest["version"] >= 2
        stamp_arrays = {"stamps": _pack(_stamp_arrays(batch.stamps))} if in_columns else {}
        try:
            payloads = batch.payloads if in_columns else stamps_into_payloads(batch)
            payload_json = np.frombuffer(json.dumps(payloads, ensure_ascii=False).encode("utf-8"), np.uint8)
        except TypeError as exc:
            raise InputError(f"payloads must be JSON-serialisable ({exc})") from None
        if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in batch.ids):
            id_arrays = {"ids_int": np.asarray(batch.ids, dtype=np.int64)}
        elif all(isinstance(i, str) for i in batch.ids):
            blob, off = _encode_strings(batch.ids)
            id_arrays = {"ids_utf8": blob, "ids_off": off}
        else:
            raise InputError("ids must be all integers or all strings within a batch")
        names = self._segment_names()
        seg_dir = self.path / "segments"
        name = _claim_segment(seg_dir, (int(names[-1]) + 1) if names else 1)
        _atomic_write(seg_dir / f"{name}.npy", lambda fh: np.save(fh, np.ascontiguousarray(vectors, np.float32)))
        _atomic_write(seg_dir / f"{name}.meta.npz",
                      lambda fh: np.savez(fh, payloads_json=payload_json, **id_arrays, **stamp_arrays))
        return len(batch)

    def delete(self, ids: Sequence) -> int:
        """Rewrite every segment holding one of the ids (a live row or an older version) without them.

        Segments are append-only, so each such segment's other live rows are first written again as a new segment
        (through :meth:`upsert`: temporary file + rename), and only then are the old segments removed, oldest first
        (the ``.meta.npz`` that commits one before its vectors). A crash at any point leaves every record either as
        it was or deleted, never an older version brought back: while a deleted id's newest segment remains, it is
        what reads see. Costs a copy of the live rows of the segments involved."""
        wanted = self._ids_to_delete(ids)
        self._manifest()
        if not wanted:
            return 0
        doomed = set(wanted)
        segs = self._segments()
        names, where = self._seg_names, self._where
        affected = [s for s, seg in enumerate(segs) if not doomed.isdisjoint(seg.ids)]
        for s in affected:
            seg = segs[s]
            keep = np.asarray([r for r, i in enumerate(seg.ids) if i not in doomed and where[i] == (s, r)],
                              dtype=np.int64)
            if len(keep):
                self.upsert(VectorBatch([seg.ids[r] for r in keep.tolist()], seg.vectors[keep], seg.payloads(keep),
                                        stamps=seg.stamps(keep) if seg.stamped else None))   # else in payloads
        seg_dir = self.path / "segments"
        for s in affected:
            for suffix in (".meta.npz", ".npy"):
                try:
                    os.unlink(seg_dir / f"{names[s]}{suffix}")
                except FileNotFoundError:
                    pass
        self._cache_key = None
        return len(wanted)

    def drop(self) -> None:
        self._writable()
        if not self._manifest_path.is_file():
            raise NotFound(f"collection not found: {self.display_url}")
        self._manifest()  # refuses to delete a directory that is not ours
        shutil.rmtree(self.path)
        self._cache_key = None
