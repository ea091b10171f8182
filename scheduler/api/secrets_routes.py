"""/v1/secrets: a tenant's secrets for its tools. Admin tokens only; values go in, never out."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from tickwork.scheduler.api.deps import Session, session
from tickwork.scheduler.secrets import SecretIn, delete_secret, list_secrets, set_secret
from tickwork.sql.errors import Forbidden
from tickwork.sql.sealed import SecretBox

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])


def admin(s: Session) -> Session:
    if not s.principal.is_admin:
        raise Forbidden("a tenant's secrets are managed with an admin token (`tickwork token "
                        "create --tenant NAME --admin`)")
    return s


@router.post("", status_code=201)
async def set_(body: SecretIn, s: Session = Depends(session)) -> dict:
    """Set a secret: {"name", "value"} -> {"name", "created_at", "updated_at"} (never the
    value). Setting a name again replaces its value."""
    return await set_secret(admin(s).conn, s.principal.tenant_id, body, SecretBox.from_settings)


@router.get("")
async def list_(s: Session = Depends(session)) -> dict:
    """The tenant's secrets by name: names and dates, never values."""
    return await list_secrets(admin(s).conn, s.principal.tenant_id)


@router.delete("/{name}", status_code=204)
async def remove(name: str, s: Session = Depends(session)) -> None:
    """Remove a secret; a tool asking for it afterwards is told it is not set."""
    await delete_secret(admin(s).conn, s.principal.tenant_id, name)
