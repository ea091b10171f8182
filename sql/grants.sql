-- Least-privilege grants, applied by `tickwork migrate` after the migrations (idempotent, so
-- every new table is covered). The roles themselves are created by the operator (with their
-- passwords) and none of them owns anything; a role that does not exist is passed over.
--   tickwork_scheduler  the minute tick, the stale sweep, retention
--   tickwork_worker     claims, runs, the journal, approvals' pauses and resumes
--   tickwork_api        the HTTP API (and POST /v1/tick, so it is also a scheduler)
DO $grants$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['tickwork_scheduler', 'tickwork_worker', 'tickwork_api'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM %I', role_name);
            EXECUTE format('GRANT USAGE ON SCHEMA public TO %I', role_name);
        END IF;
    END LOOP;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_scheduler') THEN
        GRANT SELECT, UPDATE ON schedules TO tickwork_scheduler;
        GRANT SELECT ON agents TO tickwork_scheduler;
        GRANT SELECT, INSERT, UPDATE, DELETE ON executions TO tickwork_scheduler;
        -- (SELECT wherever an INSERT uses ON CONFLICT or RETURNING.)
        GRANT SELECT, INSERT ON queue_tasks TO tickwork_scheduler;
        GRANT SELECT, INSERT, DELETE ON skipped_fires, run_events TO tickwork_scheduler;
        GRANT SELECT, DELETE ON tool_results, stream_tickets TO tickwork_scheduler;
        GRANT EXECUTE ON FUNCTION manage_journal_partitions(timestamptz, integer, integer)
            TO tickwork_scheduler;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_worker') THEN
        GRANT SELECT, UPDATE, DELETE ON queue_tasks TO tickwork_worker;
        GRANT SELECT, INSERT ON execution_claims TO tickwork_worker;
        -- INSERT on executions: at its own deadline a worker gives the sweep's verdict, which
        -- mints the retry (the same code path as the sweep).
        GRANT SELECT, INSERT, UPDATE ON executions TO tickwork_worker;
        GRANT SELECT ON agents, demo_records, approvals TO tickwork_worker;
        GRANT DELETE ON schedules TO tickwork_worker;  -- a run whose agent is gone removes them
        GRANT SELECT, INSERT ON run_events, tool_results, tool_call_results TO tickwork_worker;
        GRANT SELECT, INSERT, UPDATE ON run_states, tool_catalog TO tickwork_worker;
        GRANT DELETE ON run_states TO tickwork_worker;  -- a resume consumes the saved state
        GRANT INSERT ON approvals TO tickwork_worker;
        GRANT SELECT, INSERT ON demo_outbox TO tickwork_worker;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_api') THEN
        GRANT SELECT ON tenants, api_tokens, tool_catalog, run_events, skipped_fires TO tickwork_api;
        -- A token's last use (about once a minute) and its revocation (DELETE /v1/tokens/{id});
        -- creating tenants and tokens stays with the owner (`tickwork token create`).
        GRANT UPDATE (last_used_at, revoked_at) ON api_tokens TO tickwork_api;
        GRANT SELECT, INSERT, UPDATE, DELETE ON agents, schedules TO tickwork_api;
        GRANT SELECT, INSERT, UPDATE ON executions, approvals TO tickwork_api;
        GRANT SELECT, INSERT, DELETE ON queue_tasks TO tickwork_api;
        -- Cancelling a run waiting for approval deletes its saved state, which the API never
        -- reads (it holds the waiting call's real arguments): only the key is readable.
        GRANT SELECT (execution_id), DELETE ON run_states TO tickwork_api;
        GRANT SELECT, INSERT, DELETE ON stream_tickets TO tickwork_api;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_scheduler') THEN
            GRANT tickwork_scheduler TO tickwork_api;  -- POST /v1/tick runs the tick
        END IF;
    END IF;
END
$grants$;
