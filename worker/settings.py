"""Worker settings, from TICKWORK_* environment variables; passed in, never read globally."""

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tickwork.worker.compaction import ContextLimits, parse_context_windows

MAX_PATIENCE_SECONDS = 7 * 24 * 3600


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    # Runs one worker process holds at once: a ceiling the operator picks (memory is the
    # limit; a run waiting on its model or a tool holds no connection).
    concurrency: int = 4
    # While slots free quickly, claim a few runs ahead of them (worker/claim_ahead.py); off, a
    # worker never holds more runs than its concurrency.
    claim_ahead: bool = True
    # Runs of one tenant running at once across the fleet, held at the claim (0: no cap). Each
    # worker applies its own setting: give every worker the same.
    tenant_max_concurrent_runs: int = 0
    poll_interval_seconds: float = 1.0
    lease_seconds: int = 60
    shutdown_grace_seconds: float = 30.0
    # Past this many model turns a run ends as hard_stop even without tool calls to meter
    # (the walls below meter tool calls; this bounds a model that only talks).
    max_model_turns: int = 500
    # The four walls and the hard cap (DESIGN.md "The four walls"); hard_cap 0 disables it.
    per_tool_cap: int = 40
    aggregate_cap: int = 40
    delivery_reserve: int = 5
    query_loop_cap: int = 10
    hard_cap: int = 100
    # The stop gate.
    continuation_units: int = 20
    judge_window: int = 8
    # Tokens one run may spend on model calls (judge included); past it the run ends like the
    # hard cap. 0 means no budget.
    token_budget: int = 0
    # What is sent to the model keeps the tool results of this many latest turns whole; older
    # ones are masked as a stub (the journal and the saved state keep everything).
    context_keep_turns: int = 3
    # Names first (worker/tool_index.py): a model call carries the local tools' schemas and
    # those the run loaded with load_tools; the prompt names the rest. False: every schema on
    # every call (for a model that cannot be trusted to load what it needs).
    tool_schemas_on_demand: bool = True
    # Each model alias's context window in tokens: one number for every alias, or
    # "alias=N" entries (a bare number among them is the default for unlisted aliases).
    model_context_tokens: str = "8192"
    # When a call's reported input tokens reach this fraction of its alias's window, the older
    # part of the conversation is summarised (alias "summary") in what is sent; a fixed
    # threshold in tokens overrides the fraction when not 0.
    context_compact_fraction: float = 0.7
    context_compact_tokens: int = 0
    # A vendor tool call still running after this long is stopped and told to the model.
    tool_timeout_seconds: float = 60.0
    offload_threshold_chars: int = 4000
    offload_preview_chars: int = 800
    # query_file: each query runs in its own process, killed past this time limit, with this
    # much memory (worker/tools/sandbox.py).
    query_file_time_limit_seconds: float = 2.0
    query_file_memory_mb: int = 512
    # Bytes of JSON one query_file answer may hold; rows past it are left out, and it says so.
    query_file_max_answer_bytes: int = 1_000_000
    # run_python's sandbox (worker/tools/python_sandbox.py): a call's wall time (tool calls from
    # its code included), CPU over the sandbox's life, memory, processes, printed output kept
    # per call, and its /scratch size.
    python_wall_seconds: float = 30.0
    python_cpu_seconds: int = 120
    python_memory_mb: int = 512
    python_max_processes: int = 16
    python_max_output_chars: int = 100_000
    python_scratch_mb: int = 64

    @field_validator("tenant_max_concurrent_runs")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("TICKWORK_TENANT_MAX_CONCURRENT_RUNS must be 0 (no cap) or a "
                             f"positive whole number (got {value})")
        return value

    # How long a run waits out a model outage (connection errors, 5xx, 429), parked without a
    # worker, before it fails (worker/outage.py); 0 fails it at once.
    provider_patience_seconds: float = 900.0

    @field_validator("provider_patience_seconds")
    @classmethod
    def _patience_in_range(cls, value: float) -> float:
        if not 0 <= value <= MAX_PATIENCE_SECONDS:  # NaN fails this too
            raise ValueError(f"provider_patience_seconds must be a number of seconds from 0 to "
                             f"{MAX_PATIENCE_SECONDS} (a week); got {value}")
        return value

    @field_validator("concurrency")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"concurrency must be a whole number of at least 1 (got {value})")
        return value

    @field_validator("model_context_tokens")
    @classmethod
    def _windows(cls, value: str) -> str:
        parse_context_windows(value)  # raises a one-sentence error naming the bad entry
        return value

    @field_validator("context_compact_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(f"TICKWORK_CONTEXT_COMPACT_FRACTION must be above 0 and at most 1 "
                             f"(got {value})")
        return value

    @field_validator("context_compact_tokens")
    @classmethod
    def _threshold(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"TICKWORK_CONTEXT_COMPACT_TOKENS must be 0 (use the fraction) or a "
                             f"positive number of tokens (got {value})")
        return value

    def context_limits(self) -> ContextLimits:
        return ContextLimits(windows=parse_context_windows(self.model_context_tokens),
                             fraction=self.context_compact_fraction,
                             fixed=self.context_compact_tokens)
