"""Prometheus metrics of the scheduling side (served at GET /metrics).

Two kinds. The tick's own timings are process metrics, observed by whichever process ticks and
kept on the default registry. Everything about runs, queues, approvals and the journal is read
from the database at scrape time: workers have no HTTP port, and any API process can answer
for all of them, because the database is the one place that knows. Those gauges come from a
custom collector on a registry of each app, so several apps in one process never clash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from psycopg import AsyncConnection

from tickwork.sql import QUERIES

TICK_DURATION = Histogram("tickwork_tick_duration_seconds", "Duration of one whole tick.")
TICK_FAILURES = Counter("tickwork_tick_failures_total", "Ticks that failed (never retried).")

# name -> help, for the scalar gauges of get_metric_gauges (column name = name minus prefix).
_SCALAR_GAUGES = {
    "queue_depth": "Queue tasks waiting for a worker (not leased).",
    "queue_oldest_age_seconds": "Seconds since the oldest unleased queue task became available "
                                "(0 when the queue is empty).",
    "approvals_pending": "Approvals waiting for a person's decision.",
    "due_lag_max_seconds": "Largest delay between a cron fire's scheduled time and the tick that "
                           "wrote its execution, over cron executions created in the last 5 "
                           "minutes (retries excluded; 0 when there were none).",
    "oldest_transaction_age_seconds": "Age of the oldest open transaction of a client session "
                                      "on this database (0 when none); long ones hold back "
                                      "vacuum of the queue and journal tables.",
    "workers_present": "Worker processes connected to this database and holding their "
                       "presence lock (a killed worker's goes with its session).",
}
# The SQL column for due lag keeps its unit last; the metric name puts _max last.
_METRIC_NAMES = {"due_lag_max_seconds": "tickwork_due_lag_seconds_max"}


@dataclass
class DatabaseSnapshot:
    """What one scrape read from the database, plus this process's SSE subscriber count."""

    gauges: dict[str, float] = field(default_factory=dict)
    executions: list[dict[str, Any]] = field(default_factory=list)
    journal: list[dict[str, Any]] = field(default_factory=list)
    sse_subscribers: int = 0


async def read_snapshot(conn: AsyncConnection, *, sse_subscribers: int = 0) -> DatabaseSnapshot:
    """Run the scrape's three queries (each cheap: see sql/queries/metrics.sql)."""
    row = await (await conn.execute(QUERIES["get_metric_gauges"])).fetchone()
    executions = await (await conn.execute(QUERIES["count_executions_by_state"])).fetchall()
    journal = await (await conn.execute(QUERIES["count_recent_refusals_and_verdicts"])).fetchall()
    return DatabaseSnapshot(gauges={name: float(row[name]) for name in _SCALAR_GAUGES},
                            executions=executions, journal=journal,
                            sse_subscribers=sse_subscribers)


class DatabaseCollector(Collector):
    """Yields the gauges of the snapshot it was last given (one per scrape, set just before
    the registry is rendered, with no await in between, so concurrent scrapes never mix)."""

    def __init__(self) -> None:
        self.snapshot = DatabaseSnapshot()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot
        for column, help_text in _SCALAR_GAUGES.items():
            name = _METRIC_NAMES.get(column, f"tickwork_{column}")
            yield GaugeMetricFamily(name, help_text, value=snap.gauges.get(column, 0.0))
        yield self._executions(snap)
        yield from self._journal(snap)
        yield GaugeMetricFamily("tickwork_sse_subscribers",
                                "Journal tails (SSE streams) open on this API process.",
                                value=snap.sse_subscribers)

    @staticmethod
    def _executions(snap: DatabaseSnapshot) -> GaugeMetricFamily:
        family = GaugeMetricFamily("tickwork_executions", "Executions by status (waiting: "
                                   "for a person) and outcome (outcome 'none' while "
                                   "unfinished).",
                                   labels=["status", "outcome"])
        for row in snap.executions:
            family.add_metric([row["status"], row["outcome"]], row["count"])
        return family

    @staticmethod
    def _journal(snap: DatabaseSnapshot) -> Iterator[GaugeMetricFamily]:
        walls = GaugeMetricFamily("tickwork_wall_refusals", "budget_refusal events journaled "
                                  "in the last hour, by wall.", labels=["wall"])
        verdicts = GaugeMetricFamily("tickwork_gate_verdicts", "gate_decision events journaled "
                                     "in the last hour, by verdict.", labels=["verdict"])
        for row in snap.journal:
            family = walls if row["type"] == "budget_refusal" else verdicts
            family.add_metric([row["label"]], row["count"])
        yield walls
        yield verdicts


class AppMetrics:
    """One app's registry: the database collector and the failed-login brake's counters. The
    default registry (tick timings, process metrics) is rendered alongside it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = DatabaseCollector()
        self.registry.register(self.collector)
        self.auth_failures = Counter(
            "tickwork_auth_failures", "Requests refused because the token they presented was "
            "wrong, revoked or expired (this API process).", registry=self.registry)
        self.auth_throttled = Counter(
            "tickwork_auth_throttled", "Of those, the ones answered 429 because their address "
            "had failed too often (the brake engaged).", registry=self.registry)

    def render(self, snapshot: DatabaseSnapshot) -> bytes:
        """The exposition text for one scrape. Synchronous on purpose: see DatabaseCollector."""
        self.collector.snapshot = snapshot
        return generate_latest(REGISTRY) + generate_latest(self.registry)
