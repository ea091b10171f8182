"""Scheduler settings, from TICKWORK_* environment variables. Passed in, never read globally."""

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    tick_batch_size: int = 1000
    sweep_batch_size: int = 500
    # Missed fires recorded per schedule per tick after downtime; the run itself always happens.
    missed_fire_record_limit: int = 1440
    default_timeout_minutes: int = 5
    default_max_attempts: int = 3
    retention_days: int = 30
    retention_batch_size: int = 1000
    sse_keepalive_seconds: float = 15.0
    tail_poll_seconds: float = 1.0
    stream_ticket_ttl_seconds: int = 600
    auth_failure_limit: int = 30  # failed token attempts per client per window; 0 disables
    auth_failure_window_seconds: float = 60.0
    # Comma-separated addresses/CIDRs of reverse proxies whose X-Forwarded-For is believed by
    # the failed-login brake. Empty: the header is ignored and the peer address counts.
    trusted_proxies: str = ""
    test_mode: bool = False
    # /docs and /redoc (FastAPI's pages load their scripts from a third-party CDN, on the origin
    # that holds the operator's token): off unless TICKWORK_API_DOCS=true. /openapi.json stays.
    api_docs: bool = False

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        from scheduler.api.throttle import parse_networks

        parse_networks(value)  # refuse a typo at startup, not at the first failed login
        return value
