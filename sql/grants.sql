-- Least-privilege grants, applied by `tickwork migrate` after the migrations (idempotent, so
-- every new table is covered). The roles themselves are created by the operator (with their
-- passwords) and none of them owns anything; a role that does not exist is passed over.
--   tickwork_scheduler  the minute tick, the stale sweep, retention
--   tickwork_worker     claims, runs, the journal, approvals' pauses and resumes
--   tickwork_api        the HTTP API (and POST /v1/tick, through narrow functions)
-- Every role also loses EXECUTE on functions granted here before (REVOKE ALL ON FUNCTIONS).
DO $grants$
DECLARE
    role_name text;
    table_name text;
    across text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['tickwork_scheduler', 'tickwork_worker', 'tickwork_api'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM %I', role_name);
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM %I', role_name);
            EXECUTE format('GRANT USAGE ON SCHEMA public TO %I', role_name);
        END IF;
    END LOOP;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_scheduler') THEN
        -- A tick advances a schedule's times, nothing else of it.
        GRANT SELECT ON schedules TO tickwork_scheduler;
        GRANT UPDATE (next_run, last_run, updated_at) ON schedules TO tickwork_scheduler;
        GRANT SELECT ON agents TO tickwork_scheduler;
        -- The sweep's verdict changes only these columns; retention deletes finished runs.
        GRANT SELECT, INSERT, DELETE ON executions TO tickwork_scheduler;
        GRANT UPDATE (status, outcome, breadcrumb, reason, finished_at) ON executions
            TO tickwork_scheduler;
        -- (SELECT wherever an INSERT uses ON CONFLICT or RETURNING.)
        GRANT SELECT, INSERT ON queue_tasks TO tickwork_scheduler;
        GRANT SELECT, INSERT, DELETE ON skipped_fires TO tickwork_scheduler;
        -- The sweep journals a timed-out run's end through journal_run_complete (0029);
        -- retention deletes whole runs' journals.
        GRANT SELECT, DELETE ON run_events TO tickwork_scheduler;
        GRANT SELECT, DELETE ON tool_results, stream_tickets TO tickwork_scheduler;
        GRANT EXECUTE ON FUNCTION manage_journal_partitions(timestamptz, integer, integer),
                                  journal_run_complete(uuid, jsonb)
            TO tickwork_scheduler;
        -- Retention deletes a batch of finished runs with their claims, approvals and states
        -- through one function (0037), never those tables directly.
        GRANT EXECUTE ON FUNCTION retention_delete_runs(timestamptz, integer) TO tickwork_scheduler;
        -- The sweep fails timed-out runs and mints their retries through the one minting
        -- function (0041), the door with its injected clock; its own INSERT on executions stays
        -- for the tick's dispatch.
        GRANT EXECUTE ON FUNCTION fail_and_retry_executions(uuid[], boolean, uuid),
                                  fail_and_retry_executions(uuid[], boolean, uuid, timestamptz)
            TO tickwork_scheduler;
        -- The sweep's verdict ends runs: the webhook enqueue trigger (0034, 0035) reads which
        -- webhooks want the event (never their secrets) and queues through a narrow door.
        GRANT SELECT (tenant_id, events) ON webhooks TO tickwork_scheduler;
        GRANT EXECUTE ON FUNCTION webhooks_queue_run_end(uuid), webhooks_queue_approval(text)
            TO tickwork_scheduler;
        -- The sweep reminds and expires approvals waiting past their TTL through two narrow
        -- doors (0075): it may not decide approvals or drop saved states itself.
        GRANT EXECUTE ON FUNCTION remind_waiting_approvals(integer, integer, timestamptz),
                                  expire_waiting_runs(integer, integer, timestamptz)
            TO tickwork_scheduler;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_worker') THEN
        -- INSERT: a released resumed run's resume task is queued again (release.sql); retries
        -- are queued inside fail_and_retry_executions (0041).
        GRANT SELECT, INSERT, UPDATE, DELETE ON queue_tasks TO tickwork_worker;
        GRANT SELECT, INSERT ON execution_claims TO tickwork_worker;
        -- A resume names the worker that took the run back (claim_resumed_execution), for the
        -- sweep's question whether that worker is still there (0064).
        GRANT UPDATE (worker_id) ON execution_claims TO tickwork_worker;
        -- No INSERT on executions (RELIABILITY S4): the retry a worker's own deadline verdict
        -- or a release mints goes through fail_and_retry_executions (0041), the sweep's
        -- statement behind a door that takes no date (not the sweep's dated one). UPDATE only
        -- of what a run changes (claim, suspend, resume, finish, release: worker.sql,
        -- approvals.sql, release.sql), never whose run it is (tenant_id, agent_id, schedule_id).
        GRANT SELECT ON executions TO tickwork_worker;
        GRANT EXECUTE ON FUNCTION fail_and_retry_executions(uuid[], boolean, uuid)
            TO tickwork_worker;
        GRANT UPDATE (status, outcome, reason, breadcrumb, started_at, finished_at, deadline,
                      run_token, usage, answer)
            ON executions TO tickwork_worker;
        -- The claim sets a run's timeout to its agent's timeout_minutes, when it has one (0077).
        GRANT UPDATE (timeout_minutes) ON executions TO tickwork_worker;
        GRANT SELECT ON agents, demo_records, approvals TO tickwork_worker;
        -- A run whose agent is gone removes its schedules through a narrow function (0029);
        -- the worker cannot delete schedules itself.
        GRANT EXECUTE ON FUNCTION remove_schedules_of_missing_agent(uuid),
                                  journal_run_complete(uuid, jsonb) TO tickwork_worker;
        GRANT SELECT, INSERT ON run_events, tool_results, tool_call_results TO tickwork_worker;
        GRANT SELECT, INSERT, UPDATE ON run_states TO tickwork_worker;
        GRANT DELETE ON run_states TO tickwork_worker;  -- a resume consumes the saved state
        -- A worker publishes the tools it carries at start (worker/tools/publish.py, an upsert):
        -- it may add a tool and refresh a tool's description, never rename or delete one.
        GRANT SELECT ON tool_catalog TO tickwork_worker;
        GRANT INSERT (key, tool_class, is_local, description, parameters, published_at),
              UPDATE (tool_class, is_local, description, parameters, published_at)
            ON tool_catalog TO tickwork_worker;
        GRANT INSERT ON approvals TO tickwork_worker;
        GRANT SELECT, INSERT ON demo_outbox TO tickwork_worker;
        -- A chat's run is told the chat's earlier messages (list_chat_history); the worker
        -- never writes a chat (a message and its run are the API's, in one statement).
        GRANT SELECT ON chats, chat_messages TO tickwork_worker;
        -- The webhook deliverer (worker/webhooks/): it signs with the secrets, so only it reads
        -- them; it claims, records and prunes deliveries (events are queued through the
        -- narrow doors of 0035, so no role needs INSERT on webhook_deliveries).
        GRANT SELECT (id, tenant_id, events, url, secret) ON webhooks TO tickwork_worker;
        -- A tool of a tenant's run asks for one of the tenant's secrets (ctx.secret).
        GRANT SELECT ON tenant_secrets TO tickwork_worker;
        GRANT SELECT, UPDATE, DELETE ON webhook_deliveries TO tickwork_worker;
        GRANT EXECUTE ON FUNCTION webhooks_queue_run_end(uuid), webhooks_queue_approval(text)
            TO tickwork_worker;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_api') THEN
        -- The journal is read-only to the API: a cancel's terminal event goes through
        -- journal_run_complete (0029).
        GRANT SELECT ON tenants, api_tokens, tool_catalog, run_events TO tickwork_api;
        -- /metrics counts the workers present (0064).
        GRANT SELECT ON worker_presences TO tickwork_api;
        -- A token's last use (about once a minute) and its revocation (DELETE /v1/tokens/{id});
        -- creating tenants and tokens stays with the owner (`tickwork token create`).
        GRANT UPDATE (last_used_at, revoked_at) ON api_tokens TO tickwork_api;
        -- Column grants: what the routes change (and the tick's dispatch on schedules), never
        -- whose row it is (tenant_id, agent_id) nor what a person was asked to approve.
        GRANT SELECT, INSERT, DELETE ON agents, schedules TO tickwork_api;
        GRANT UPDATE (name, instructions, tools, auto_approve, status, updated_at)
            ON agents TO tickwork_api;
        -- An agent's own settings (0077).
        GRANT UPDATE (model, timeout_minutes, max_tool_calls, token_budget, max_concurrent_runs)
            ON agents TO tickwork_api;
        GRANT UPDATE (status, timeout_minutes, overlap, input, display, next_run, last_run,
                      updated_at)
            ON schedules TO tickwork_api;
        GRANT SELECT, INSERT ON approvals TO tickwork_api;
        GRANT UPDATE (status, reason, decided_at) ON approvals TO tickwork_api;
        -- Runs by hand and the tick's dispatch insert; a cancel and the tick's sweep change
        -- only a run's state, never whose run it is.
        GRANT SELECT, INSERT ON executions TO tickwork_api;
        GRANT UPDATE (status, outcome, reason, breadcrumb, finished_at, cancel_requested_at)
            ON executions TO tickwork_api;
        GRANT SELECT, INSERT, DELETE ON queue_tasks TO tickwork_api;
        -- Cancelling a run waiting for approval deletes its saved state, which the API never
        -- reads (it holds the waiting call's real arguments): only the key is readable.
        GRANT SELECT (execution_id), DELETE ON run_states TO tickwork_api;
        GRANT SELECT, INSERT, DELETE ON stream_tickets TO tickwork_api;
        -- Webhooks: the API writes a secret once (and shows it once) but never reads it back.
        GRANT SELECT (id, tenant_id, url, events, created_at), INSERT, DELETE ON webhooks
            TO tickwork_api;
        GRANT SELECT ON webhook_deliveries TO tickwork_api;
        -- Tenants' secrets: set, listed by name and date, removed; the sealed value is written
        -- but never read back by the API.
        GRANT SELECT (tenant_id, name, created_at, updated_at), INSERT, DELETE
            ON tenant_secrets TO tickwork_api;
        GRANT UPDATE (sealed, updated_at) ON tenant_secrets TO tickwork_api;
        -- Chats (0082): created and listed by the routes; a message is numbered on the chat
        -- and inserted by start_chat_message, never whose chat it is (tenant_id, agent_id).
        GRANT SELECT, INSERT ON chats, chat_messages TO tickwork_api;
        GRANT UPDATE (last_message_seq, last_run_id, updated_at) ON chats TO tickwork_api;
        -- A cancel ends a run: the enqueue trigger asks whether the tenant has a webhook for
        -- it, then queues through the narrow door of 0035.
        GRANT EXECUTE ON FUNCTION webhooks_queue_run_end(uuid), webhooks_queue_approval(text)
            TO tickwork_api;
        -- POST /v1/tick runs the tick as the API's own role: the dispatch with the grants
        -- above (and skipped-fire records), the sweep's journal event through
        -- journal_run_complete, and retention only through retention_upkeep (database clock,
        -- at least 7 days kept). It is no longer a member of tickwork_scheduler, which may
        -- delete journals and call the partition function with any date.
        GRANT SELECT, INSERT ON skipped_fires TO tickwork_api;
        GRANT EXECUTE ON FUNCTION journal_run_complete(uuid, jsonb),
                                  retention_upkeep(integer, integer) TO tickwork_api;
        -- The tick's sweep fails timed-out runs and mints their retries through the one
        -- minting function (0041), as the scheduler's does.
        GRANT EXECUTE ON FUNCTION fail_and_retry_executions(uuid[], boolean, uuid),
                                  fail_and_retry_executions(uuid[], boolean, uuid, timestamptz)
            TO tickwork_api;
        -- ... and reminds and expires waiting approvals through the scheduler's doors (0075).
        GRANT EXECUTE ON FUNCTION remind_waiting_approvals(integer, integer, timestamptz),
                                  expire_waiting_runs(integer, integer, timestamptz)
            TO tickwork_api;
        IF EXISTS (SELECT 1 FROM pg_auth_members m
                     JOIN pg_roles r ON r.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
                    WHERE r.rolname = 'tickwork_scheduler' AND u.rolname = 'tickwork_api') THEN
            REVOKE tickwork_scheduler FROM tickwork_api;
        END IF;
    END IF;

    -- Row-level security (migration 0031): the API sees the rows of the tenant its transaction
    -- is scoped to (or every tenant's, for work that spans them by design); the scheduler and
    -- the worker work across tenants and pass.
    -- webhooks (migration 0033, numbered after 0031) is walled here: ENABLE is idempotent.
    FOREACH table_name IN ARRAY ARRAY['agents', 'schedules', 'executions', 'approvals',
                                      'skipped_fires', 'webhooks', 'tenant_secrets', 'chats',
                                      'chat_messages'] LOOP
        CONTINUE WHEN to_regclass(table_name) IS NULL;
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', table_name);
        EXECUTE format('DROP POLICY IF EXISTS tenant_wall ON %I', table_name);
        EXECUTE format('DROP POLICY IF EXISTS across_tenants ON %I', table_name);
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwork_api') THEN
            EXECUTE format('CREATE POLICY tenant_wall ON %I TO tickwork_api'
                           ' USING (tenant_visible(tenant_id))'
                           ' WITH CHECK (tenant_visible(tenant_id))', table_name);
        END IF;
        SELECT string_agg(quote_ident(rolname), ', ') INTO across FROM pg_roles
         WHERE rolname IN ('tickwork_scheduler', 'tickwork_worker');
        IF across IS NOT NULL THEN
            EXECUTE format('CREATE POLICY across_tenants ON %I TO %s USING (true)'
                           ' WITH CHECK (true)', table_name, across);
        END IF;
    END LOOP;
END
$grants$;
