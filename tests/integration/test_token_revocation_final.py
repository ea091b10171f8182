"""A revoked token stays revoked (migration 0071): the API's role, which may revoke a token,
cannot set revoked_at back to NULL or move it, and the token keeps being refused (issue 28, S7
item 9)."""

from __future__ import annotations

import psycopg
import pytest

from tickwork.scheduler.tokens import authenticate, create_token, revoke_token
from tickwork.sql.db import connect
from tickwork.sql.errors import Unauthorized
from tests.integration.test_roles import granted  # noqa: F401  (the roles' fixture)


async def test_the_api_role_cannot_unrevoke_a_token(granted, db_url):  # noqa: F811
    owner = await connect(db_url, application_name="tickwork-test")
    try:
        token = await create_token(owner, tenant="acme", admin=True)
    finally:
        await owner.close()
    api = await connect(granted["tickwork_api"], application_name="tickwork-test")
    try:
        revoked = await revoke_token(api, token)
        await revoke_token(api, token)  # revoking again is still fine: the first time is kept
        for undo in ("UPDATE api_tokens SET revoked_at = NULL WHERE id = %s",
                     "UPDATE api_tokens SET revoked_at = now() + interval '1 day' WHERE id = %s"):
            with pytest.raises(psycopg.errors.CheckViolation, match="cannot be undone"):
                await api.execute(undo, (revoked["id"],))
        with pytest.raises(Unauthorized, match="revoked"):
            await authenticate(api, token)
        row = await (await api.execute("SELECT revoked_at FROM api_tokens WHERE id = %s",
                                       (revoked["id"],))).fetchone()
        assert row["revoked_at"] == revoked["revoked_at"]
    finally:
        await api.close()
