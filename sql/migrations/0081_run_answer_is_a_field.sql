-- A run's final answer is a field of the run (GET /v1/runs, GET /v1/runs/{id}) and of its
-- run.completed / run.failed webhook deliveries, not only the payload of its run_complete event.
-- The worker writes it, already redacted, in the statement that records the run's verdict
-- (insert_journal_batch): no extra statement on the hot path. NULL: no answer (a run still
-- going, or one that ended without one: cancelled, timed out by the sweep, failed).
ALTER TABLE executions ADD COLUMN answer text;

-- The run-end door of 0035, replaced only to carry the answer in the delivery's data. Nothing
-- else changes: what it queues, when, and its uniqueness.
CREATE OR REPLACE FUNCTION webhooks_queue_run_end(execution uuid) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    queued integer;
BEGIN
    -- Called from the AFTER trigger of the statement that ended the run: a VOLATILE function's
    -- query takes a new snapshot and sees that update.
    INSERT INTO webhook_deliveries (id, webhook_id, type, data)
    SELECT webhook_delivery_id(), w.id, 'run.' || e.status,
           jsonb_build_object('run_id', e.id, 'agent_id', e.agent_id,
                              'schedule_id', e.schedule_id, 'status', e.status,
                              'outcome', e.outcome, 'reason', e.reason,
                              'attempt', e.attempt, 'usage', e.usage, 'answer', e.answer)
      FROM executions e
      JOIN webhooks w ON w.tenant_id = e.tenant_id AND 'run.' || e.status = ANY (w.events)
     WHERE e.id = execution
       AND e.status IN ('completed', 'failed', 'cancelled')
       AND NOT (e.status = 'completed' AND e.breadcrumb IS NOT DISTINCT FROM 'suspended')
       AND NOT (e.status = 'failed' AND e.breadcrumb IS NOT DISTINCT FROM 'released')
    ON CONFLICT (webhook_id, type, (coalesce(data ->> 'approval_id', data ->> 'run_id')))
    DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    IF queued > 0 THEN
        PERFORM pg_notify('tickwork_webhooks', 'due');  -- wakes deliverers at commit
    END IF;
    RETURN queued;
END;
$$;

REVOKE ALL ON FUNCTION webhooks_queue_run_end(uuid) FROM PUBLIC;
