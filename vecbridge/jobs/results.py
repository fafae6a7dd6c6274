"""What the write and check jobs return: typed results for Python callers, the same JSON for the CLI.

``result.written`` reads as any attribute; ``result.as_dict()`` is what ``--json`` prints (keys unchanged from the
plain dicts these results replace, and ``result["written"]`` still works for code written against those).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


class JobResult:
    """Shared behaviour of the result dataclasses."""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __getitem__(self, key: str):
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: str) -> bool:
        return key in self.__dataclass_fields__

    def get(self, key: str, default=None):
        return getattr(self, key, default) if key in self.__dataclass_fields__ else default


@dataclass
class MigrationPlan(JobResult):
    """What ``migrate --dry-run`` would do: counts, dimensions, an estimate of the read+map time, the target size."""

    source: str
    target: str
    count: int
    source_dim: int
    target_dim: int
    metric: str
    batch_size: int
    field: str | None
    estimated_read_map_s: float
    estimated_target_bytes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class DryRun(JobResult):
    plan: MigrationPlan
    dry_run: bool = True


@dataclass
class MigrationResult(JobResult):
    source: str
    target: str
    count: int              # records in the source when the run started
    read: int               # records read, this run and the runs it resumed
    written: int            # records written by this run
    resumed_from: int       # records the interrupted runs had written
    seconds: float
    vectors_per_s: float | None
    field: str | None
    batch_size: int


@dataclass
class MergeResult(JobResult):
    a: str
    b: str
    into: str
    policy: str
    a_count: int
    b_count: int
    written: int
    linked: int             # B records that absorbed their linked A record
    renamed: int            # unlinked A records written as "a:<id>" because B had the id
    count: int              # records the merged collection holds
    seconds: float


@dataclass
class Check(JobResult):
    name: str
    ok: bool
    detail: str


@dataclass
class VerifyResult(JobResult):
    ok: bool
    source: str
    target: str
    checks: list[Check]
