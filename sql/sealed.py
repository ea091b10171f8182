"""Tenants' secrets sealed at rest: Fernet (AES-128-CBC with an HMAC-SHA256, from the
`cryptography` library) under keys Postgres never sees.

TICKWORK_SECRET_KEY holds one or more Fernet keys, comma-separated: the first seals, every one
opens (MultiFernet), so a key is rotated by putting the new one first, running `tickwork secret
rotate` (which seals every value again under it), then dropping the old one. `tickwork up` keeps
a key of its own in its data folder (0600) when the variable is not set.

A sealed value carries its tenant and name, checked when it is opened: a sealed value copied to
another tenant's row, or renamed, does not open.
"""

from __future__ import annotations

import json
from uuid import UUID

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic_settings import BaseSettings, SettingsConfigDict

from tickwork.sql.errors import TickworkError

MAX_VALUE_CHARS = 65_536


class SecretsUnavailable(TickworkError):
    """No key is configured, or the key cannot open a stored value; the message says which."""

    code = "secrets_unavailable"


class SecretSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    secret_key: str = ""


def new_key() -> str:
    return Fernet.generate_key().decode()


class SecretBox:
    """Seals and opens tenants' secret values with the configured keys."""

    def __init__(self, keys: str) -> None:
        parts = [part.strip() for part in keys.split(",") if part.strip()]
        if not parts:
            raise SecretsUnavailable(
                "tenants' secrets need TICKWORK_SECRET_KEY (one or more Fernet keys, comma-"
                "separated; make one with `tickwork secret new-key`)")
        try:
            self._fernet = MultiFernet([Fernet(part.encode()) for part in parts])
        except (ValueError, TypeError):
            raise SecretsUnavailable(
                "TICKWORK_SECRET_KEY is not a list of Fernet keys (each 32 url-safe base64 "
                "bytes; make one with `tickwork secret new-key`)") from None

    @classmethod
    def from_settings(cls) -> SecretBox:
        return cls(SecretSettings().secret_key)

    def seal(self, tenant_id: UUID, name: str, value: str) -> str:
        plain = json.dumps({"t": str(tenant_id), "n": name, "v": value})
        return self._fernet.encrypt(plain.encode()).decode()

    def open(self, tenant_id: UUID, name: str, sealed: str) -> str:
        try:
            plain = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError):
            raise SecretsUnavailable(
                f"the secret {name!r} cannot be opened with TICKWORK_SECRET_KEY (was it sealed "
                "under a key that is no longer listed?)") from None
        if plain.get("t") != str(tenant_id) or plain.get("n") != name:
            raise SecretsUnavailable(f"the stored secret {name!r} does not belong to this "
                                     "tenant and name; set it again")
        return str(plain["v"])

    def reseal(self, sealed: str) -> str:
        """The same value sealed under the first key (rotation)."""
        return self._fernet.rotate(sealed.encode()).decode()


def reseal_all(url: str, box: SecretBox) -> int:
    """Seal every stored value again under the first key, in one transaction (rotation); the
    owner's connection (row-level security does not apply to it). Returns how many."""
    import psycopg
    from psycopg.rows import dict_row

    from tickwork.sql import QUERIES

    with psycopg.connect(url, row_factory=dict_row, application_name="tickwork-rotate",
                         prepare_threshold=None) as conn:
        rows = conn.execute(QUERIES["list_tenant_secrets_to_reseal"]).fetchall()
        for row in rows:
            box.open(row["tenant_id"], row["name"], row["sealed"])  # every key still opens
            conn.execute(QUERIES["update_tenant_secret_sealed"], {
                "tenant_id": row["tenant_id"], "name": row["name"],
                "sealed": box.reseal(row["sealed"])})
    return len(rows)
