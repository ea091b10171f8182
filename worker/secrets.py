"""A run's door to its tenant's secrets (``await ctx.secret(name)`` in a tool), and what keeps
the values it handed out from being shown.

A value is opened only for a tool of a run of the same tenant. From then on every text the run
stores or shows is scrubbed of it, by exact value: the journal's payloads (and so SSE, the
viewer, webhooks built from them), the run's reason and answer, an approval's arguments, a
suspended run's saved state, and tool results before they are stored or sent to the model.
A run that never asks for a secret pays nothing for this.
"""

from __future__ import annotations

from typing import Any, Callable
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.sealed import SecretBox
from tickwork.worker.redact import journal_json

MARK = "[REDACTED:tenant_secret]"
# Shorter values would blank ordinary words wherever they appear; a secret that short is no
# secret, and is still never returned by the API or stored in plain text.
MIN_SCRUBBED_CHARS = 4


class SecretNotSet(LookupError):
    """The tenant has no secret of that name; the message says how to set it."""


class RunSecrets:
    def __init__(self, pool: AsyncConnectionPool, tenant_id: UUID,
                 box: Callable[[], SecretBox]) -> None:
        self._pool, self._tenant_id, self._box = pool, tenant_id, box
        self._values: list[str] = []  # longest first, so a value inside another goes second

    async def get(self, name: str) -> str:
        """The value of the tenant's secret ``name`` (ctx.secret)."""
        if not isinstance(name, str) or not name:
            raise SecretNotSet("ctx.secret takes the secret's name, a non-empty string")
        async with self._pool.connection() as conn:
            cursor = await conn.execute(QUERIES["get_tenant_secret_sealed"],
                                        {"tenant_id": self._tenant_id, "name": name})
            row = await cursor.fetchone()
        if row is None:
            raise SecretNotSet(f"this tenant has no secret named {name[:100]!r}; an admin sets "
                               f"it with `tickwork secret set {name[:100]}`")
        value = self._box().open(self._tenant_id, name, row["sealed"])
        self._remember(value)
        return value

    def _remember(self, value: str) -> None:
        if len(value) >= MIN_SCRUBBED_CHARS and value not in self._values:
            self._values.append(value)
            self._values.sort(key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, MARK)
        return text

    def scrub(self, value: Any) -> Any:
        """``value`` (text, or JSON-like data) with every handed-out secret replaced."""
        if not self._values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.scrub(k): self.scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.scrub(item) for item in value]
        return value

    def journal_json(self, payload: Any) -> str:
        """The journal's encoder (worker.redact.journal_json) on the payload scrubbed of the
        exact values first (before redaction's patterns could change a part of one)."""
        return journal_json(self.scrub(payload))
