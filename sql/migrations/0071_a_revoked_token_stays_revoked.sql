-- A revoked token stays revoked, for every role.
--
-- The API may set revoked_at (DELETE /v1/tokens/{id}), and with that column grant it could
-- also set it back to NULL, or move it, and bring a revoked token back to life (issue 28: a
-- compromised API process, or a bug in a route, would undo a revocation someone relied on).
-- Column grants cannot say "only from NULL to a time", so a trigger does: once revoked_at is
-- set it never changes again. Revoking twice already keeps the first time (revoke_api_token's
-- coalesce), so no caller is refused for it. The WHEN clause keeps the function off every
-- other update (a token's last use, about once a minute).
CREATE FUNCTION api_tokens_refuse_unrevoke() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'api token % was revoked at %; a revocation cannot be undone or moved',
        OLD.id, OLD.revoked_at
        USING ERRCODE = 'check_violation', CONSTRAINT = 'api_tokens_revocation_is_final';
END;
$$;

CREATE TRIGGER api_tokens_revocation_is_final
    BEFORE UPDATE OF revoked_at ON api_tokens
    FOR EACH ROW
    WHEN (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at)
    EXECUTE FUNCTION api_tokens_refuse_unrevoke();
