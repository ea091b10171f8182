-- The enqueue triggers of 0034, made cheaper on the hot path without widening anyone's rights.
--
-- Measured (bench/webhooks.py): a SECURITY DEFINER function with SET search_path pays for the
-- setting on every call, which roughly doubled the cost of finishing a run for a tenant with
-- no webhook at all. Now the trigger functions run as the caller and only ask whether the
-- tenant has a webhook for the event (the roles may read webhooks' tenant_id and events, never
-- the secret); only when one does, they call a narrow SECURITY DEFINER door that queues the
-- deliveries.
--
-- The doors take an id, not data: they read the run or the approval themselves and queue only
-- what is true of it now (a run in a reported terminal state, a pending approval), and a unique
-- index makes each (webhook, event, run or approval) one delivery. A role that calls a door by
-- hand can at most cause a notification that was due anyway, once.

CREATE UNIQUE INDEX webhook_deliveries_once_idx ON webhook_deliveries
    (webhook_id, type, (coalesce(data ->> 'approval_id', data ->> 'run_id')));

CREATE FUNCTION webhooks_queue_run_end(execution uuid) RETURNS integer
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
                              'attempt', e.attempt, 'usage', e.usage)
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

CREATE FUNCTION webhooks_queue_approval(approval text) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    queued integer;
BEGIN
    -- The tool's name, never its arguments (they may hold secrets).
    INSERT INTO webhook_deliveries (id, webhook_id, type, data)
    SELECT webhook_delivery_id(), w.id, 'approval.required',
           jsonb_build_object('approval_id', a.id, 'run_id', a.execution_id,
                              'agent_id', e.agent_id, 'schedule_id', e.schedule_id,
                              'tool', a.tool, 'status', a.status)
      FROM approvals a
      JOIN webhooks w ON w.tenant_id = a.tenant_id AND 'approval.required' = ANY (w.events)
      LEFT JOIN executions e ON e.id = a.execution_id
     WHERE a.id = approval AND a.status = 'pending'
    ON CONFLICT (webhook_id, type, (coalesce(data ->> 'approval_id', data ->> 'run_id')))
    DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    IF queued > 0 THEN
        PERFORM pg_notify('tickwork_webhooks', 'due');
    END IF;
    RETURN queued;
END;
$$;

REVOKE ALL ON FUNCTION webhooks_queue_run_end(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION webhooks_queue_approval(text) FROM PUBLIC;

-- The triggers (and their WHEN clause) stay as 0034 made them; their functions now run as the
-- caller. Relations are schema-qualified because the caller's search_path applies.
CREATE OR REPLACE FUNCTION webhooks_enqueue_run_event() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.webhooks w
                WHERE w.tenant_id = NEW.tenant_id AND 'run.' || NEW.status = ANY (w.events)) THEN
        PERFORM public.webhooks_queue_run_end(NEW.id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION webhooks_enqueue_approval_event() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.webhooks w
                WHERE w.tenant_id = NEW.tenant_id AND 'approval.required' = ANY (w.events)) THEN
        PERFORM public.webhooks_queue_approval(NEW.id);
    END IF;
    RETURN NULL;
END;
$$;
