"""Ray Data for pipelines that already run on Ray: a collection as a :class:`ray.data.Dataset`, a dataset written
into a collection, and an :class:`~vecbridge.align.artifact.Alignment` as a ``map_batches`` function.

>>> import vecbridge.integrations.ray as vbr                                              # doctest: +SKIP
>>> from vecbridge import Alignment                                                       # doctest: +SKIP
>>> ds = vbr.read_collection("postgresql://db/app?table=docs")                           # doctest: +SKIP
>>> ds = ds.map_batches(Alignment.load("minilm-to-mpnet.vb"))                             # doctest: +SKIP
>>> print(vbr.write_collection(ds, "postgresql://db/app?table=docs_mpnet"))               # doctest: +SKIP
wrote 1,000,000 records into postgresql://db/app?table=docs_mpnet in 412.5 s (1,000,000 held)

Records travel as rows of three columns: ``id`` (int64 or string, as the store keeps them), ``vector`` (a
fixed-shape float32 tensor column: a 2-D ``float32`` array in a numpy batch) and ``payload`` (the record's payload
as one JSON string). JSON, not an Arrow struct: a struct column needs one schema for every row of every block, so
payloads whose keys differ between records would come back with ``None`` for every key another record had, values
whose type changes from one record to the next would not load at all, and an empty payload has no struct type;
a JSON string keeps each record's payload exactly as the store holds it (``json.loads`` in a ``map`` gives dicts).

Reads are split with the stores' key ranges (:meth:`vecbridge.connectors.base.Collection.key_ranges`): one Ray read
task per slice, every record read exactly once. Writes are upserts by id, so a task Ray re-runs after a worker died
rewrites the same records and changes nothing. Both need a store that many processes may open at once: an embedded
store only one process may open (Milvus Lite, Qdrant local mode) is refused.

This module imports Ray; ``import vecbridge`` and the CLI never import it.
"""
from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import ray
import ray.data
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask
from ray.data.extensions import ArrowTensorArray

from ..connectors import connect
from ..connectors.base import Collection, VectorBatch, check_metric
from ..errors import CheckFailed, InputError, StoreError
from ..jobs.rewrite import create_target, store_batch_size
from ..results import JobResult
from ..runtime.guard import exclusive_writer, refuse_inputs_as_target
from ..runtime.ray_engine import Sealed, raise_one_line

#: the columns of a dataset of records, in order
COLUMNS = ("id", "vector", "payload")
MODES = ("create", "append", "overwrite")
#: bytes per record besides the vector, for Ray's size estimates (an id and a small payload)
_ROW_OVERHEAD = 64
#: bytes of records per write task
WRITE_BYTES = 4 << 20

__all__ = ["read_collection", "write_collection", "CollectionDatasource", "CollectionDatasink", "WriteSummary",
           "COLUMNS"]


def _refuse_single_process(coll: Collection, role: str) -> None:
    """Every Ray task opens the store itself: one that a single process may open would fail there or be another,
    empty store (one in this process's memory)."""
    if coll.capabilities.single_process:
        raise InputError(f"the {role} {coll.display_url} is an embedded store that one process at a time can open: "
                         f"Ray Data needs the collection on a server or in a file:// store")


def _url_of(obj) -> str:
    return obj.url if isinstance(obj, Collection) else Sealed(obj).url


# --- reading ------------------------------------------------------------------------------------------------------
def _id_array(ids: list) -> pa.Array:
    try:
        return pa.array(ids)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        raise InputError("a batch mixes integer and string ids (or holds an integer beyond int64): a Ray Data "
                         "column has one type") from None


def _payload_json(ids: list, payloads: list) -> pa.Array:
    out = []
    for i, p in zip(ids, payloads):
        try:
            out.append(json.dumps(p or {}, ensure_ascii=False, separators=(",", ":")))
        except (TypeError, ValueError) as exc:
            raise InputError(f"payload of record {i!r} is not JSON-serialisable ({exc})") from None
    return pa.array(out, type=pa.string())


def to_block(batch: VectorBatch, columns: Sequence[str] = COLUMNS) -> pa.Table:
    """One batch of records as an Arrow table with the ``columns`` asked for (of :data:`COLUMNS`)."""
    cols: dict[str, Any] = {}
    for name in columns:
        if name == "id":
            cols[name] = _id_array(batch.ids)
        elif name == "vector":
            cols[name] = ArrowTensorArray.from_numpy(np.ascontiguousarray(batch.vectors, dtype=np.float32))
        else:
            cols[name] = _payload_json(batch.ids, batch.payloads)
    return pa.table(cols)


def read_range(url: "Sealed | str", after: Any, until: Any, batch_size: int,
               columns: Sequence[str]) -> Iterator[pa.Table]:
    """The body of one read task: the slice after ``after`` up to ``until``, one block per scanned batch."""
    coll = connect(Sealed(url).url, read_only=True)
    for batch in coll.scan(batch_size=batch_size, after=after, until=until):
        if len(batch):
            yield to_block(batch, columns)


class CollectionDatasource(Datasource):
    """A collection as a Ray Data source: one read task per key range of the collection.

    The row counts Ray sees are the collection's count split evenly over the ranges: exact where the store cuts
    ranges at exact quantiles (file, Milvus), estimates elsewhere, and their sum is always the count (Ray answers
    ``Dataset.count()`` from it without reading: the count when the dataset was made). The collection is opened on
    the driver to check it and count it; the read tasks open it again from its URL (sealed: a password never shows
    in what Ray prints)."""

    def __init__(self, url, *, batch_size: int | None = None, columns: Sequence[str] | None = None):
        super().__init__()
        coll = url if isinstance(url, Collection) else connect(Sealed(url).url, read_only=True)
        _refuse_single_process(coll, "source")
        if not coll.capabilities.key_ranges:
            raise InputError(f"{coll.display_url} cannot be split into key ranges, which parallel reads need: "
                             f"read it with vecbridge's single-process jobs, or copy it into a store that can")
        columns = list(COLUMNS if columns is None else columns)
        wrong = [c for c in columns if c not in COLUMNS]
        if wrong or not columns or len(set(columns)) != len(columns):
            raise InputError(f"columns must be distinct names among {', '.join(COLUMNS)}; got {columns}")
        info = coll.info()   # a missing collection fails here, in one line
        self.url = Sealed(coll.url)
        self.identity = coll.identity
        self.display_url = coll.display_url
        self.dim, self.metric, self.count = info.dim, info.metric, info.count
        self.batch_size = store_batch_size(coll, batch_size)
        self.columns = columns

    def get_name(self) -> str:
        return "Collection"

    def _row_bytes(self) -> int:
        return (4 * self.dim if "vector" in self.columns else 0) + _ROW_OVERHEAD

    def estimate_inmemory_data_size(self) -> int | None:
        return self.count * self._row_bytes()

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context=None) -> list[ReadTask]:
        coll = connect(self.url.url, read_only=True)
        ranges = coll.key_ranges(max(int(parallelism), 1))
        n = len(ranges)
        tasks = []
        for i, r in enumerate(ranges):
            rows = self.count * (i + 1) // n - self.count * i // n
            meta = BlockMetadata(num_rows=rows, size_bytes=rows * self._row_bytes(), input_files=None,
                                 exec_stats=None)
            read = functools.partial(read_range, self.url, r.after, r.until, self.batch_size, tuple(self.columns))
            tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
        return tasks

    def __repr__(self) -> str:
        return f"CollectionDatasource({self.display_url!r})"


def read_collection(url, *, parallelism: int | None = None, batch_size: int | None = None,
                    columns: Sequence[str] | None = None, **read_args) -> "ray.data.Dataset":
    """The collection ``url`` names as a :class:`ray.data.Dataset` of ``id``, ``vector``, ``payload`` rows.

    ``parallelism``: how many key ranges (read tasks) to cut (None: Ray decides from the collection's size);
    ``batch_size``: records per scan request and per block (None: the store's preferred size); ``columns``: a subset
    of :data:`COLUMNS`. Other keywords go to :func:`ray.data.read_datasource` (``concurrency``, ``num_cpus``...).
    The collection must exist, split into key ranges and be open to many processes at once (not Milvus Lite)."""
    if parallelism is not None and int(parallelism) <= 0:
        raise InputError(f"parallelism must be a positive number of key ranges, got {parallelism}")
    source = CollectionDatasource(url, batch_size=batch_size, columns=columns)
    return ray.data.read_datasource(source, override_num_blocks=parallelism, **read_args)


# --- writing ------------------------------------------------------------------------------------------------------
def _payloads(ids: list, values) -> list[dict]:
    out = []
    for i, v in zip(ids, values):
        if isinstance(v, (str, bytes)):
            try:
                v = json.loads(v)
            except ValueError:
                raise InputError(f"payload of record {i!r} is not valid JSON") from None
        if v is None:
            v = {}
        if not isinstance(v, dict):
            raise InputError(f"payload of record {i!r} must be a JSON object or a dict, got {type(v).__name__}")
        out.append(v)
    return out


def from_block(block: Block, batch_size: int) -> Iterator[VectorBatch]:
    """A block (Arrow or pandas) with ``id``, ``vector`` and optionally ``payload`` as batches of at most
    ``batch_size`` records. A record without a payload column is written with an empty payload."""
    acc = BlockAccessor.for_block(block)
    names = set(acc.column_names())
    missing = [c for c in ("id", "vector") if c not in names]
    if missing:
        raise InputError(f"the dataset has no {' or '.join(missing)} column (columns: {', '.join(sorted(names))})")
    wanted = ["id", "vector"] + (["payload"] if "payload" in names else [])
    rows = acc.num_rows()
    for lo in range(0, rows, batch_size):
        part = BlockAccessor.for_block(acc.slice(lo, min(lo + batch_size, rows), copy=False)).to_numpy(wanted)
        ids = part["id"].tolist()
        vectors = part["vector"]
        if vectors.dtype == object:   # a list column, or tensors of varying shape: one row each
            try:
                vectors = np.stack(list(vectors))
            except ValueError:
                raise InputError("the vector column holds vectors of different lengths") from None
        payloads = _payloads(ids, part["payload"]) if "payload" in part else None
        yield VectorBatch(ids, np.asarray(vectors, dtype=np.float32), payloads)


def _dim_of(schema) -> int | None:
    """The vector length a dataset's schema promises (a fixed-shape tensor or fixed-size list column)."""
    if schema is None:
        return None
    try:
        kind = schema.field("vector").type
    except (KeyError, AttributeError):
        names = getattr(schema, "names", None) or []
        raise InputError(f"the dataset has no vector column (columns: {', '.join(names)})") from None
    shape = getattr(kind, "shape", None)
    if shape is not None and len(shape) == 1 and shape[0] is not None:
        return int(shape[0])
    if isinstance(kind, pa.FixedSizeListType):
        return int(kind.list_size)
    return None


class CollectionDatasink(Datasink[int]):
    """A collection as a Ray Data sink: the driver creates it once (:meth:`on_write_start`, when the first block is
    ready: its schema gives the dimension if none was named), each write task upserts its blocks by id."""

    def __init__(self, url, *, dim: int | None = None, metric: str = "cosine", mode: str = "create",
                 batch_size: int | None = None):
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if dim is not None and int(dim) <= 0:
            raise InputError(f"dimension must be positive, got {dim}")
        coll = url if isinstance(url, Collection) else connect(Sealed(url).url, read_only=False)
        self.url = Sealed(coll.url)
        self.display_url = coll.display_url
        self.dim = None if dim is None else int(dim)
        self.metric, self.mode = check_metric(metric), mode
        self.batch_size = store_batch_size(coll, batch_size)
        self.started = self.created = False
        self.written = 0

    def get_name(self) -> str:
        return "Collection"

    @property
    def min_bytes_per_write(self) -> int:
        """Blocks are bundled up to this many bytes per write task (each opens its own store connection). Naming a
        size also keeps Ray from fusing the write with the maps before it, whose input schema :meth:`on_write_start`
        would then be handed instead of the schema of what is written."""
        return WRITE_BYTES

    def on_write_start(self, schema=None) -> None:
        """On the driver, once: check the target and create it (``create``: it must not exist; ``overwrite``: it
        is dropped first; ``append``: created only if missing, else its dimension must match)."""
        tgt = connect(self.url.url, read_only=False)
        found = _dim_of(schema)
        if self.dim is not None and found is not None and found != self.dim:
            raise InputError(f"the dataset holds {found}-d vectors but dim={self.dim} was asked for")
        dim = self.dim or found
        if self.mode == "append" and tgt.exists():
            have = tgt.info()
            if dim is not None and have.dim != dim:
                raise InputError(f"{tgt.display_url} holds {have.dim}-d vectors; the dataset's are {dim}-d")
            self.dim = have.dim
        else:
            if dim is None:
                raise InputError("cannot tell the vectors' dimension from the dataset: pass dim=")
            if self.mode == "create" and tgt.exists():
                raise StoreError(f"target already exists: {tgt.display_url} (write with mode='append' to add to "
                                 f"it, or mode='overwrite' to replace it)")
            create_target(tgt, dim, self.metric, overwrite=self.mode == "overwrite")
            self.created, self.dim = True, dim
        self.started = True

    def write(self, blocks: Iterable[Block], ctx) -> int:
        """In a write task: upsert every block, ``batch_size`` records per request; returns the records written."""
        tgt = connect(self.url.url, read_only=False)
        written = 0
        for block in blocks:
            for batch in from_block(block, self.batch_size):
                if len(batch):
                    tgt.upsert(batch)
                    written += len(batch)
        return written

    def on_write_complete(self, write_result) -> None:
        self.written = int(sum(write_result.write_returns))

    def __repr__(self) -> str:
        return f"CollectionDatasink({self.display_url!r}, mode={self.mode!r})"


@dataclass
class WriteSummary(JobResult):
    """What :func:`write_collection` did: records written (each once, however often Ray re-ran a task) and what the
    target holds after it."""

    target: str
    mode: str
    written: int
    held: int
    seconds: float

    def __str__(self) -> str:
        return f"wrote {self.written:,} records into {self.target} in {self.seconds:.1f} s ({self.held:,} held)"


def _sources(ds) -> list[CollectionDatasource]:
    """The collections a dataset reads, found in its plan (a materialized dataset no longer knows them)."""
    found, stack, seen = [], [getattr(getattr(ds, "_logical_plan", None), "dag", None)], set()
    while stack:
        op = stack.pop()
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        for attr in ("datasource", "datasource_or_legacy_reader"):
            source = getattr(op, attr, None)
            if isinstance(source, CollectionDatasource) and all(s is not source for s in found):
                found.append(source)
        stack.extend(getattr(op, "input_dependencies", None) or [])
    return found


def write_collection(ds: "ray.data.Dataset", url, *, dim: int | None = None, metric: str | None = None,
                     mode: str = "create", batch_size: int | None = None, into_source: bool = False,
                     build_index: bool = True, concurrency: int | None = None) -> WriteSummary:
    """Write a dataset of ``id``, ``vector`` (and ``payload``) rows into the collection ``url`` names.

    * ``mode``: ``"create"`` a new collection (one that exists is refused), ``"overwrite"`` (drop and recreate) or
      ``"append"`` (upsert into it, creating it if missing). A record replaces the one with its id, payload included.
    * ``dim``: the vectors' dimension (None: read from the dataset's schema); ``metric``: of a new collection (None:
      the metric of the collection the dataset reads, else cosine).
    * ``into_source``: a dataset is never written into a collection it reads (found in its plan, however the URLs
      are spelled; a materialized dataset no longer knows its sources) unless this is True; ``overwrite`` of a
      source is always refused.
    * ``build_index``: where the store defers its vector index to after a bulk load (pgvector), build it at the end.

    The target is created once, by the driver; write tasks upsert by id, so Ray's re-runs of a task are harmless.
    A new target is dropped again if the write fails. Returns a :class:`WriteSummary`; raises :class:`CheckFailed`
    if a new target does not hold every record written (duplicate ids in the dataset)."""
    if not isinstance(ds, ray.data.Dataset):
        raise InputError(f"write_collection writes a ray.data.Dataset, got {type(ds).__name__}")
    coll = url if isinstance(url, Collection) else connect(Sealed(url).url, read_only=False)
    _refuse_single_process(coll, "target")
    sources = _sources(ds)
    if metric is None:
        metrics = {s.metric for s in sources}
        metric = metrics.pop() if len(metrics) == 1 else "cosine"
    sink = CollectionDatasink(coll, dim=dim, metric=metric, mode=mode, batch_size=batch_size)
    if not into_source or mode == "overwrite":
        hint = ("overwrite would drop it before it is read" if into_source
                else "write to a new collection (or into_source=True to upsert into it on purpose)")
        refuse_inputs_as_target(coll, [(connect(s.url.url, read_only=True), "the dataset's own source")
                                        for s in sources], hint)
    coll.check_writable()
    t0 = time.perf_counter()
    with exclusive_writer(coll):
        try:
            ds.write_datasink(sink, concurrency=concurrency)
            if not sink.started:   # an empty dataset: Ray never called on_write_start
                sink.on_write_start(None)
        except Exception as exc:
            if sink.created:
                with contextlib.suppress(Exception):
                    connect(sink.url.url, read_only=False).drop()
            raise_one_line(ray, exc)
        if build_index and sink.created and coll.capabilities.deferred_index:
            coll.build_index()
        held = coll.info().count
    seconds = time.perf_counter() - t0
    if sink.created and held != sink.written:
        raise CheckFailed(f"record count mismatch: {sink.written:,} records written but {coll.display_url} holds "
                          f"{held:,}: the dataset holds an id more than once")
    return WriteSummary(coll.display_url, mode, sink.written, held, seconds)
