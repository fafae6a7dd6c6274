"""Prometheus metrics of one service: requests and their latency per endpoint, method and status code, and where
the upgrade stands (its stage, which model's vectors it serves, its records by origin, the native fraction),
read from its state file at each scrape.

With several uvicorn workers each is a process of its own: ``vecbridge serve`` then points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder before they start, and a scrape adds up every worker's counts
(prometheus-client's multiprocess mode).
"""
from __future__ import annotations

import os

from ..jobs.upgrade import STAGES
from ..runtime.record_stamps import ORIGINS

#: latency buckets, seconds: a store's search takes milliseconds, a model's batch up to seconds
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class ServiceMetrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        many = multiprocess()
        reg = None if many else self.registry
        gauge = {"registry": reg, **({"multiprocess_mode": "mostrecent"} if many else {})}
        labels = ["endpoint", "method", "status"]
        self.requests = Counter("vecbridge_requests", "Requests answered, by endpoint, method and status code.",
                                labels, registry=reg)
        self.latency = Histogram("vecbridge_request_seconds", "Time to answer a request, by endpoint, method and "
                                 "status code.", labels, buckets=BUCKETS, registry=reg)
        self.stage = Gauge("vecbridge_upgrade_stage", "1 for the stage the upgrade is in, 0 for the others.",
                           ["stage"], **gauge)
        self.serving_new = Gauge("vecbridge_upgrade_serving_new", "1 while the upgrade serves the new model's "
                                 "vectors (after cutover), 0 while it serves the old ones.", **gauge)
        self.native = Gauge("vecbridge_upgrade_native_fraction", "Share of the records whose new vector is the new "
                            "model's own (re-embedded), not mapped.", **gauge)
        self.records = Gauge("vecbridge_upgrade_records", "Records by how their new vector was made (re-embedding "
                             "progress).", ["origin"], **gauge)

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint, method, str(status)).observe(seconds)

    def upgrade(self, status: dict) -> None:
        """Set the upgrade's gauges from its status."""
        for stage in STAGES:
            self.stage.labels(stage).set(1.0 if status["stage"] == stage else 0.0)
        self.serving_new.set(1.0 if status["serving"] == "new" else 0.0)
        self.native.set(float(status["native_fraction"]))
        for origin in ORIGINS:
            self.records.labels(origin).set(float(status["counts"].get(origin, 0)))

    def exposition(self) -> tuple[bytes, str]:
        """The text format a Prometheus scrape reads, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if multiprocess():
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
