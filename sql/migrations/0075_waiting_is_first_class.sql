-- Waiting is first class: a run waiting for a person counts as unfinished, and a wait ends.
--
-- 1. The tick's overlap check (claim_due_schedules) counts a run waiting for approval
--    (completed, breadcrumb 'suspended') as unfinished, so an overlap = 'skip' schedule does
--    not fire again while its last run waits: its partial index now holds waiting runs too
--    (same name, swapped in place as 0043 did; `schedule_id IS NOT NULL` keeps lookups of one
--    run by id on the primary key).
-- 2. Approvals expire (TICKWORK_APPROVAL_TTL_HOURS): the sweep ends a run whose approval has
--    waited past the TTL `cancelled` with reason 'expired' (journaled), and its approval
--    'expired'; halfway there, an `approval.reminder` webhook is queued once, recorded by the
--    approval's reminded_at. Both go through narrow SECURITY DEFINER doors (the scheduler's and
--    the API's roles may not update approvals, drop saved states or write the journal).
CREATE INDEX executions_unfinished_or_waiting_idx ON executions (schedule_id)
    WHERE (status IN ('queued', 'running') OR (status = 'completed' AND breadcrumb = 'suspended'))
      AND schedule_id IS NOT NULL;
DROP INDEX executions_unfinished_idx;
ALTER INDEX executions_unfinished_or_waiting_idx RENAME TO executions_unfinished_idx;

ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'cancelled', 'expired'));
-- When the halfway reminder was queued (NULL: not yet). Set once, in the statement that queues
-- the reminder's deliveries, so two sweeps never remind twice.
ALTER TABLE approvals ADD COLUMN reminded_at timestamptz;
-- The sweep's question spans tenants: pending approvals by age.
CREATE INDEX approvals_pending_age_idx ON approvals (created_at) WHERE status = 'pending';

ALTER TABLE webhooks DROP CONSTRAINT webhooks_events_known;
ALTER TABLE webhooks ADD CONSTRAINT webhooks_events_known CHECK (cardinality(events) >= 1
    AND events <@ ARRAY['approval.required', 'approval.reminder', 'run.failed', 'run.completed',
                        'run.cancelled']::text[]);
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_type_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_type_check CHECK (type IN
    ('approval.required', 'approval.reminder', 'run.failed', 'run.completed', 'run.cancelled'));

-- One batch of approval reminders: pending approvals at least half the TTL old (and not yet
-- past it: those are expired instead), not reminded yet, oldest first, skipping rows another
-- sweep (or a decision) holds. Each is marked reminded and gets one `approval.reminder`
-- delivery per webhook of its tenant that wants it (the once-index of 0035 holds it to one).
-- `at` is the sweep's clock (NULL: the database's). Returns how many approvals were reminded.
CREATE FUNCTION remind_waiting_approvals(ttl_hours integer, batch_size integer,
                                         at timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    clock timestamptz := coalesce(at, now());
    ttl interval;
    reminded integer;
    queued integer;
BEGIN
    IF ttl_hours IS NULL OR ttl_hours < 1 THEN
        RAISE EXCEPTION 'an approval TTL is at least 1 hour, not %', ttl_hours
            USING ERRCODE = '22023';
    END IF;
    ttl := make_interval(hours => ttl_hours);
    WITH due AS (
        SELECT a.id FROM approvals a
         WHERE a.status = 'pending' AND a.reminded_at IS NULL
           AND a.created_at <= clock - ttl / 2 AND a.created_at > clock - ttl
           AND EXISTS (SELECT 1 FROM executions e  -- its run still waits
                        WHERE e.id = a.execution_id
                          AND e.status = 'completed' AND e.breadcrumb = 'suspended')
         ORDER BY a.created_at
         LIMIT least(greatest(batch_size, 1), 10000)
           FOR UPDATE SKIP LOCKED
    ), marked AS (
        UPDATE approvals a SET reminded_at = clock
          FROM due WHERE a.id = due.id
        RETURNING a.id, a.tenant_id, a.execution_id, a.tool, a.status, a.created_at
    ), delivered AS (
        -- The tool's name, never its arguments (they may hold secrets).
        INSERT INTO webhook_deliveries (id, webhook_id, type, data)
        SELECT webhook_delivery_id(), w.id, 'approval.reminder',
               jsonb_build_object('approval_id', m.id, 'run_id', m.execution_id,
                                  'agent_id', e.agent_id, 'schedule_id', e.schedule_id,
                                  'tool', m.tool, 'status', m.status,
                                  'asked_at', m.created_at, 'expires_at', m.created_at + ttl)
          FROM marked m
          JOIN webhooks w ON w.tenant_id = m.tenant_id AND 'approval.reminder' = ANY (w.events)
          LEFT JOIN executions e ON e.id = m.execution_id
        ON CONFLICT (webhook_id, type, (coalesce(data ->> 'approval_id', data ->> 'run_id')))
        DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM marked), (SELECT count(*) FROM delivered)
      INTO reminded, queued;
    IF queued > 0 THEN
        PERFORM pg_notify('tickwork_webhooks', 'due');  -- wakes deliverers at commit
    END IF;
    RETURN reminded;
END;
$$;

-- One batch of expiries: runs waiting for approval (completed, breadcrumb 'suspended') whose
-- pending approval is older than the TTL. As a person's cancel of a waiting run does (sql
-- update_execution_cancelled): the run becomes cancelled (outcome cancelled, reason 'expired'),
-- a terminal run_complete is journaled so tails close, its pending approvals become 'expired',
-- its saved state (the waiting call's real arguments) and any resume task are dropped, tails
-- are woken, and the run.cancelled webhook follows from 0034's trigger. The approval is locked
-- first and the run second, both SKIP LOCKED: a decision or a cancel in flight keeps its row
-- and wins (never waited for, so no deadlock), and a run is expired only while its approval is
-- still pending. `at` is the sweep's clock (NULL: the database's). Returns how many runs ended.
CREATE FUNCTION expire_waiting_runs(ttl_hours integer, batch_size integer,
                                    at timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    clock timestamptz := coalesce(at, now());
    expired integer;
    journaled_count integer;
    approvals_count integer;
    woken_count integer;
BEGIN
    IF ttl_hours IS NULL OR ttl_hours < 1 THEN
        RAISE EXCEPTION 'an approval TTL is at least 1 hour, not %', ttl_hours
            USING ERRCODE = '22023';
    END IF;
    WITH due AS (
        SELECT a.id, a.execution_id FROM approvals a
         WHERE a.status = 'pending' AND a.created_at <= clock - make_interval(hours => ttl_hours)
           AND EXISTS (SELECT 1 FROM executions e  -- so a stray approval never fills a batch
                        WHERE e.id = a.execution_id
                          AND e.status = 'completed' AND e.breadcrumb = 'suspended')
         ORDER BY a.created_at
         LIMIT least(greatest(batch_size, 1), 10000)
           FOR UPDATE SKIP LOCKED
    ), waiting AS (
        SELECT e.id FROM executions e
         WHERE e.id IN (SELECT execution_id FROM due)
           AND e.status = 'completed' AND e.breadcrumb = 'suspended'
           FOR UPDATE SKIP LOCKED
    ), ended AS (
        UPDATE executions e
           SET status = 'cancelled', outcome = 'cancelled', reason = 'expired',
               breadcrumb = NULL, finished_at = clock
          FROM waiting w
         WHERE e.id = w.id
        RETURNING e.id, e.usage
    ), journaled AS (
        SELECT journal_run_complete(x.id,
               jsonb_build_object('status', 'cancelled', 'outcome', 'cancelled', 'by', 'expiry',
                                  'reason', 'expired', 'ttl_hours', ttl_hours,
                                  'usage', x.usage)) AS added
          FROM ended x
    ), approvals_expired AS (
        UPDATE approvals a
           SET status = 'expired', decided_at = clock,
               reason = format('expired: no decision within %s hours', ttl_hours)
          FROM ended x
         WHERE a.execution_id = x.id AND a.status = 'pending'
        RETURNING 1
    ), tasks_dropped AS (
        DELETE FROM queue_tasks q USING ended x WHERE q.execution_id = x.id
    ), states_dropped AS (
        DELETE FROM run_states s USING ended x WHERE s.execution_id = x.id
    ), tails_woken AS (
        SELECT pg_notify('tickwork_events', x.id::text) FROM ended x
    )
    -- Every CTE named in the answer, so each one runs (a plain SELECT in a WITH runs only
    -- when it is read).
    SELECT (SELECT count(*) FROM ended), (SELECT coalesce(sum(added), 0) FROM journaled),
           (SELECT count(*) FROM approvals_expired), (SELECT count(*) FROM tails_woken)
      INTO expired, journaled_count, approvals_count, woken_count;
    RETURN expired;
END;
$$;

REVOKE ALL ON FUNCTION remind_waiting_approvals(integer, integer, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION expire_waiting_runs(integer, integer, timestamptz) FROM PUBLIC;
