"""Webhook deliverer settings, from TICKWORK_WEBHOOK_* environment variables."""

from pydantic_settings import BaseSettings, SettingsConfigDict


class WebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    # One POST may take this long (connect and answer) before it counts as failed and is retried.
    webhook_timeout_seconds: float = 5.0
    # Deliveries in flight at once per worker process (each its own asyncio task).
    webhook_concurrency: int = 16
    # How often the queue is checked when no notification woke the deliverer.
    webhook_poll_seconds: float = 1.0
    # Deliver to loopback, private, link-local and other non-public addresses too (off: a
    # tenant could otherwise probe the deployment's own network; on for a laptop or an
    # in-house receiver). Checked when each attempt resolves the host.
    webhook_allow_private_addresses: bool = False
    # Delivered and given-up deliveries are kept in the log this many days.
    webhook_keep_days: int = 7
