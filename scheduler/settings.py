"""Scheduler settings, from TICKWORK_* environment variables. Passed in, never read globally."""

import ipaddress

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_APPROVAL_TTL_HOURS = 8760


def parse_networks(text: str) -> tuple[Network, ...]:
    """'10.0.0.1, 192.168.0.0/16' -> networks; a bad entry is refused with a sentence."""
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"TICKWORK_TRUSTED_PROXIES: {entry[:60]!r} is not an IP address "
                             "or CIDR range (e.g. 10.0.0.5 or 10.0.0.0/8)") from None
    return tuple(networks)


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    tick_batch_size: int = 1000
    sweep_batch_size: int = 500
    # How long a run may wait for a person's decision: past it, the sweep ends the run
    # cancelled with reason 'expired' (its approval 'expired'); halfway, one approval.reminder
    # webhook. 1 hour to 1 year; a week by default.
    approval_ttl_hours: int = 168
    # Missed fires recorded per schedule per tick after downtime; the run itself always happens.
    missed_fire_record_limit: int = 1440
    retention_days: int = 30
    retention_batch_size: int = 1000  # runs per batch (one short transaction), 1..10,000
    # Each tick deletes batch after batch while they come back full, for at most this long
    # (and never past RETENTION_ENDS_BY_SECONDS into the tick: scheduler/tick.py). Half the
    # minute: one backend deletes ~200,000 runs/s, and retention must keep up with ten times
    # the fastest worker (~6,000 runs/s at --concurrency 64; bench/retention.py).
    retention_budget_seconds: float = 30.0
    # How long creating or dropping a journal partition may wait for its lock (every journal
    # append queues behind a waiting DDL); one that cannot get it is tried at the next tick.
    retention_lock_timeout_ms: int = 100
    sse_keepalive_seconds: float = 15.0
    tail_poll_seconds: float = 1.0
    stream_ticket_ttl_seconds: int = 600
    auth_failure_limit: int = 30  # failed token attempts per client per window; 0 disables
    auth_failure_window_seconds: float = 60.0
    # Each tenant's requests a second (a token bucket per tenant in each API process, bursts of
    # tenant_rate_burst); past it a request gets 429 with Retry-After. 0: no limit.
    tenant_rate_limit: float = 0.0
    tenant_rate_burst: int = 20
    # Comma-separated addresses/CIDRs of reverse proxies whose X-Forwarded-For is believed by
    # the failed-login brake. Empty: the header is ignored and the peer address counts.
    trusted_proxies: str = ""
    test_mode: bool = False
    # The API's HTTP server (tickwork/http_guard.py, scheduler/api/body_guard.py): connections
    # held at once (more are answered 503 and closed), seconds a client has to send a request's
    # headers and then its body, bytes of headers, and bytes of bodies read at once.
    api_max_connections: int = 1000
    api_header_timeout_seconds: float = 10.0
    api_body_timeout_seconds: float = 30.0
    api_max_header_bytes: int = 65_536
    api_body_budget_bytes: int = 16 * 1024 * 1024
    # The workers' model routing (alias=provider[:model], comma-separated), when the API is
    # given it too: an agent's model must then be one of its aliases. Unset: not checked here
    # (a worker fails a run whose alias it does not route, saying so).
    models: str = ""
    # /docs and /redoc (FastAPI's pages load their scripts from a third-party CDN, on the origin
    # that holds the operator's token): off unless TICKWORK_API_DOCS=true. /openapi.json stays.
    api_docs: bool = False

    @property
    def model_aliases(self) -> frozenset[str] | None:
        """The aliases TICKWORK_MODELS routes, or None when it is not set for the API."""
        aliases = frozenset(entry.partition("=")[0].strip() for entry in self.models.split(",")
                            if entry.strip())
        return aliases or None

    @field_validator("tenant_rate_limit", "tenant_rate_burst")
    @classmethod
    def _rate_not_negative(cls, value: float, info) -> float:
        if value < 0 or (info.field_name == "tenant_rate_burst" and value < 1):
            least = "1" if info.field_name == "tenant_rate_burst" else "0 (no limit)"
            raise ValueError(f"TICKWORK_{info.field_name.upper()} must be at least {least}, "
                             f"not {value}")
        return value

    @field_validator("retention_batch_size")
    @classmethod
    def _batch_in_range(cls, value: int) -> int:
        if not 1 <= value <= 10_000:
            raise ValueError(f"retention batch size must be between 1 and 10000, not {value}")
        return value

    @field_validator("approval_ttl_hours")
    @classmethod
    def _ttl_in_range(cls, value: int) -> int:
        if not 1 <= value <= MAX_APPROVAL_TTL_HOURS:
            raise ValueError(f"the approval TTL must be a whole number of hours from 1 to "
                             f"{MAX_APPROVAL_TTL_HOURS} (a year), not {value}")
        return value

    @field_validator("retention_budget_seconds")
    @classmethod
    def _budget_not_negative(cls, value: float) -> float:
        if not 0 <= value <= 3600:
            raise ValueError(f"retention budget must be between 0 and 3600 seconds, not {value}")
        return value

    @field_validator("retention_lock_timeout_ms")
    @classmethod
    def _lock_timeout_positive(cls, value: int) -> int:
        if not 1 <= value <= 60_000:
            raise ValueError(f"retention lock timeout must be between 1 and 60000 ms, not {value}")
        return value

    @field_validator("api_max_connections", "api_max_header_bytes", "api_body_budget_bytes",
                     "api_header_timeout_seconds", "api_body_timeout_seconds")
    @classmethod
    def _server_limit_positive(cls, value: float) -> float:
        if value <= 0:  # pydantic names the setting; the CLI as its variable (settings_error)
            raise ValueError(f"must be more than 0, not {value}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        parse_networks(value)  # refuse a typo at startup, not at the first failed login
        return value
