-- tickwork's schema, in one paragraph.
--
-- A tenant owns everything: agents (definitions: instructions, tool keys), schedules (a UTC
-- cron per agent, with next_run/last_run), executions (one row per agent run, whatever started
-- it: a cron fire, "run now", an API call, or a retry minted by the stale sweep) and the
-- journal of each run (run_events). An execution moves queued -> running -> completed | failed
-- | cancelled; terminal rows never change again (a trigger enforces it), except that a run
-- suspended for an approval (completed, breadcrumb 'suspended') may be resumed. queue_tasks
-- is the work queue: one row per runnable task, named by the execution id so a second insert is
-- a no-op; it is written in the same transaction as the execution, so a task is never visible
-- before the row it names. skipped_fires records every cron fire that did not get an execution
-- of its own (coalesced into a later one, skipped on overlap, or skipped while the agent was
-- inactive): a missed fire is counted, never silent. All ids are UUIDv7, minted by the app.

CREATE TABLE tenants (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_name_key UNIQUE (name),
    CONSTRAINT tenants_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$')
);

-- Tokens are stored as SHA-256 digests of 256-bit random secrets: a leaked table leaks no token.
CREATE TABLE api_tokens (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    token_hash bytea NOT NULL,
    is_admin   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash)
);
CREATE INDEX api_tokens_tenant_idx ON api_tokens (tenant_id);
