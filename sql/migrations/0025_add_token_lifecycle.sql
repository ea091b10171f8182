-- Tokens can expire, be revoked, and say when they were last used; and a cluster-wide operator
-- token (metrics that span tenants, the global tick, every tenant's tokens) is distinct from a
-- tenant's admin token. An operator token belongs to no tenant, so tenant_id becomes nullable,
-- with a check that only operator tokens lack one.
ALTER TABLE api_tokens
    ALTER COLUMN tenant_id DROP NOT NULL,
    ADD COLUMN is_operator  boolean NOT NULL DEFAULT false,
    ADD COLUMN expires_at   timestamptz,
    -- Written at most about once a minute per token (not on every request): see touch_api_token.
    ADD COLUMN last_used_at timestamptz,
    ADD CONSTRAINT api_tokens_operator_has_no_tenant CHECK (is_operator = (tenant_id IS NULL));
