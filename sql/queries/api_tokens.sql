-- name: insert_api_token
-- An operator token has no tenant (tenant_id NULL); expires_seconds NULL means never.
INSERT INTO api_tokens (id, tenant_id, token_hash, is_admin, is_operator, expires_at)
VALUES (%(id)s, %(tenant_id)s, %(token_hash)s, %(is_admin)s, %(is_operator)s,
        now() + make_interval(secs => %(expires_seconds)s::double precision))
RETURNING id, expires_at;

-- name: get_api_token_by_hash
-- Revoked and expired tokens are found too, so the refusal can say which; use_is_stale tells
-- the caller whether last_used_at is worth a write (at most about once a minute per token);
-- expires_in_seconds keeps the API's token cache from serving a token past its expiry.
SELECT t.id, t.tenant_id, t.token_hash, t.is_admin, t.is_operator,
       t.revoked_at IS NOT NULL AS revoked,
       coalesce(t.expires_at <= now(), false) AS expired,
       extract(epoch FROM t.expires_at - now()) AS expires_in_seconds,
       (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute') AS use_is_stale
  FROM api_tokens t
 WHERE t.token_hash = %(token_hash)s;

-- name: update_api_token_last_used
-- The condition keeps concurrent requests of one token from each writing the row.
UPDATE api_tokens SET last_used_at = now()
 WHERE id = %(id)s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: list_api_tokens
-- Never the token (only its digest is stored, and not even that is listed). tenant_id NULL
-- and tenant NULL mean every tenant (an operator's view, or the CLI without --tenant).
SELECT t.id, n.name AS tenant, t.is_admin, t.is_operator, t.created_at, t.expires_at,
       t.last_used_at, t.revoked_at
  FROM api_tokens t
  LEFT JOIN tenants n ON n.id = t.tenant_id
 WHERE (%(tenant_id)s::uuid IS NULL OR t.tenant_id = %(tenant_id)s::uuid)
   AND (%(tenant)s::text IS NULL OR n.name = %(tenant)s::text)
 ORDER BY t.created_at, t.id;

-- name: update_api_token_revoked
-- By id or by the token's digest; tenant_id (when not NULL) keeps a tenant admin to its own
-- tenant's tokens. Revoking twice keeps the first time.
WITH revoked AS (
    UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
     WHERE (id = %(id)s::uuid OR token_hash = %(token_hash)s::bytea)
       AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s::uuid)
    RETURNING id, tenant_id, is_admin, is_operator, created_at, expires_at, last_used_at,
              revoked_at)
SELECT r.id, n.name AS tenant, r.is_admin, r.is_operator, r.created_at, r.expires_at,
       r.last_used_at, r.revoked_at
  FROM revoked r
  LEFT JOIN tenants n ON n.id = r.tenant_id;

-- name: list_ended_api_tokens
-- Of the tokens behind open journal tails, those revoked or expired since (see
-- scheduler/api/revocation.py).
SELECT id FROM api_tokens
 WHERE id = ANY(%(ids)s::uuid[])
   AND (revoked_at IS NOT NULL OR expires_at <= now());
