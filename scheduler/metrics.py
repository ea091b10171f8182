"""Prometheus metrics of the scheduling side (served at GET /metrics)."""

from prometheus_client import Counter, Histogram

TICK_DURATION = Histogram("tickwork_tick_duration_seconds", "Duration of one whole tick.")
TICK_FAILURES = Counter("tickwork_tick_failures_total", "Ticks that failed (never retried).")
