"""Worker settings, from TICKWORK_* environment variables; passed in, never read globally."""

from pydantic_settings import BaseSettings, SettingsConfigDict


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    concurrency: int = 4
    poll_interval_seconds: float = 1.0
    lease_seconds: int = 60
    shutdown_grace_seconds: float = 30.0
    # A guard against a model that never stops calling tools until the walls arrive to do it
    # properly; past it the run ends as hard_stop.
    max_model_turns: int = 500
    offload_threshold_chars: int = 4000
    offload_preview_chars: int = 800
    journal_batch_events: int = 32
