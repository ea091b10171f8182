"""Request bodies. Strict: unknown fields are refused, numbers are numbers, and anything
timezone-bearing is refused with the reason (cron is always UTC; the client owns local time)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr,
                      model_validator)

from tickwork.sql.errors import InvalidInput
from tickwork.sql.vocabulary import AgentStatus, Overlap, ScheduleStatus


def storable_text(text: str) -> str:
    """Postgres stores neither NUL nor lone surrogates; refuse them with the field's name."""
    if "\x00" in text:
        raise ValueError("text may not contain the NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text contains a lone UTF-16 surrogate, which is not valid Unicode")
    return text


def storable_json(value: Any) -> Any:
    """JSON that Postgres' jsonb can hold: storable text, and only finite numbers (Python's
    json module lets NaN, Infinity and overflowing numbers such as 1e309 through)."""
    if isinstance(value, str):
        storable_text(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a number JSON can carry; send a finite number")
    elif isinstance(value, dict):
        for key, item in value.items():
            storable_text(key)
            storable_json(item)
    elif isinstance(value, list):
        for item in value:
            storable_json(item)
    return value


Text = Annotated[StrictStr, AfterValidator(storable_text)]
JsonObject = Annotated[dict[str, Any], AfterValidator(storable_json)]
TimeoutMinutes = Annotated[StrictInt, Field(ge=1, le=15)]
MaxAttempts = Annotated[StrictInt, Field(ge=1, le=10)]
ToolKey = Annotated[Text, Field(min_length=1, max_length=200)]
# An agent's own settings (DESIGN.md third round); None: the deployment's default.
ModelAlias = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
MaxToolCalls = Annotated[StrictInt, Field(ge=1, le=100_000)]
TokenBudget = Annotated[StrictInt, Field(ge=1, le=1_000_000_000_000)]
MaxConcurrentRuns = Annotated[StrictInt, Field(ge=1, le=100_000)]
_ZONE_KEYS = {"timezone", "tz", "time_zone", "zone"}


def refuse_zone_keys(data: Any, where: str) -> None:
    if isinstance(data, dict):
        found = sorted(k for k in data if isinstance(k, str) and k.lower() in _ZONE_KEYS)
        if found:
            raise InvalidInput(
                f"{where} may not carry a time zone ({found[0]!r}): schedules are always UTC; "
                "convert local times to a UTC cron (the tickwork CLI does this for you)",
                code="timezone_not_allowed", field=found[0])


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_zone_keys(cls, data: Any) -> Any:
        refuse_zone_keys(data, "the request")
        return data


class AgentIn(RequestBody):
    name: Annotated[Text, Field(min_length=1, max_length=200)]
    instructions: Text = ""
    tools: list[ToolKey] = []
    auto_approve: list[ToolKey] = []
    status: AgentStatus = "active"
    model: ModelAlias | None = None  # a model alias of TICKWORK_MODELS
    timeout_minutes: TimeoutMinutes | None = None  # each of its runs' timeout
    max_tool_calls: MaxToolCalls | None = None  # the hard cap of external tool calls per run
    token_budget: TokenBudget | None = None  # tokens one run may spend
    max_concurrent_runs: MaxConcurrentRuns | None = None  # its runs running at once

    @model_validator(mode="after")
    def _check(self) -> "AgentIn":
        if len(self.instructions) > 16384:
            raise InvalidInput(f"instructions are {len(self.instructions):,} characters; the "
                               "limit is 16,384", code="instructions_too_long", field="instructions")
        outside = sorted(set(self.auto_approve) - set(self.tools))
        if outside:
            raise InvalidInput(f"auto_approve names tools the agent does not have: "
                               f"{', '.join(outside)}; add them to tools first",
                               code="invalid_auto_approve", field="auto_approve")
        return self


class DisplayIn(RequestBody):
    """How the user wrote the schedule, stored beside the UTC cron for showing it back."""

    frequency: Literal["daily", "weekly", "hourly", "cron"]
    time_of_day: Annotated[StrictStr, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")] | None = None
    days_of_week: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] | None = None
    interval_hours: Literal[1, 2, 3, 4, 6, 8, 12] | None = None


class ScheduleIn(RequestBody):
    agent_id: UUID
    cron: StrictStr
    timeout_minutes: TimeoutMinutes = 5
    overlap: Overlap = "skip"
    max_attempts: MaxAttempts = 3
    display: DisplayIn | None = None
    input: JsonObject = {}


class SchedulePatch(RequestBody):
    status: ScheduleStatus | None = None
    timeout_minutes: TimeoutMinutes | None = None
    overlap: Overlap | None = None
    input: JsonObject | None = None

    @model_validator(mode="before")
    @classmethod
    def _cron_is_fixed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cron" in data:
            raise InvalidInput("a schedule's cron cannot be changed; create a schedule with the "
                               "new cron and delete this one", code="cron_immutable", field="cron")
        return data


class RunIn(RequestBody):
    input: JsonObject = {}
    timeout_minutes: TimeoutMinutes = 5


class ChatIn(RequestBody):
    title: Annotated[Text, Field(max_length=200)] | None = None


class ChatMessageIn(RequestBody):
    """A person's message to a chat. input: data handed to the run beside the text (the
    run's input.message and input.chat_id are tickwork's own)."""

    text: Annotated[Text, Field(min_length=1, max_length=100_000)]
    input: JsonObject = {}

    @model_validator(mode="after")
    def _check(self) -> "ChatMessageIn":
        if not self.text.strip():
            raise InvalidInput("text must not be blank", code="invalid_input", field="text")
        taken = sorted({"message", "chat_id"} & set(self.input))
        if taken:
            raise InvalidInput(f"input.{taken[0]} is set by the chat itself; put the message "
                               "in text and leave it out of input", field="input")
        return self


class RunNowIn(RequestBody):
    """Run-now takes no fields: the run gets the schedule's own input. An empty body or {} is
    fine; anything else is refused rather than silently ignored."""


class DecisionIn(RequestBody):
    reason: Annotated[Text, Field(max_length=2000)] | None = None


class TickIn(RequestBody):
    at: Text | None = None
