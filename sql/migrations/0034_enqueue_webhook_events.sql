-- Webhook events are queued by triggers, in the same transaction as the change they report:
-- no code path that ends a run (a worker's finish, the sweep's verdict, a person's cancel, in
-- whichever process) or creates an approval can forget to notify, and a rolled-back change
-- notifies nobody.
--
-- The hot path pays little when a tenant has no webhook: the row trigger on executions fires
-- only for a change into a terminal state (its WHEN clause is checked before any function is
-- called), and the function's first statement is an index probe of webhooks by tenant.
--
-- The functions are SECURITY DEFINER (they run as the owner) so the roles that end runs need no
-- access to webhooks, whose secrets only the deliverer may read.
--
-- What is reported: a run that ends completed, failed or cancelled (run.<status>). Not a pause
-- for approval (completed with the breadcrumb 'suspended': that is approval.required), and not
-- a run released at a worker's shutdown (failed, breadcrumb 'released'), which is retried at
-- once as a new run whose own end is reported.

-- A UUIDv7 minted in the database (the app mints the others with uuid-utils): 48 bits of
-- milliseconds, then random bits, so the delivery log sorts by creation like every other id.
CREATE FUNCTION webhook_delivery_id() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
               PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                 FROM 3)
               FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

CREATE FUNCTION webhooks_enqueue_run_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    kind text := 'run.' || NEW.status;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks w
                    WHERE w.tenant_id = NEW.tenant_id AND kind = ANY (w.events)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (id, webhook_id, type, data)
    SELECT webhook_delivery_id(), w.id, kind,
           jsonb_build_object('run_id', NEW.id, 'agent_id', NEW.agent_id,
                              'schedule_id', NEW.schedule_id, 'status', NEW.status,
                              'outcome', NEW.outcome, 'reason', NEW.reason,
                              'attempt', NEW.attempt, 'usage', NEW.usage)
      FROM webhooks w
     WHERE w.tenant_id = NEW.tenant_id AND kind = ANY (w.events);
    PERFORM pg_notify('tickwork_webhooks', 'due');  -- wakes deliverers at commit
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_webhook_events
    AFTER UPDATE OF status ON executions
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND NOT (NEW.status = 'completed' AND NEW.breadcrumb IS NOT DISTINCT FROM 'suspended')
          AND NOT (NEW.status = 'failed' AND NEW.breadcrumb IS NOT DISTINCT FROM 'released'))
    EXECUTE FUNCTION webhooks_enqueue_run_event();

-- An approval is created once per paused call (its id is deterministic and a second insert is
-- ON CONFLICT DO NOTHING, which fires no insert trigger), so approval.required is queued once.
-- The payload names the tool, never its arguments (they may hold secrets).
CREATE FUNCTION webhooks_enqueue_approval_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks w
                    WHERE w.tenant_id = NEW.tenant_id AND 'approval.required' = ANY (w.events)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (id, webhook_id, type, data)
    SELECT webhook_delivery_id(), w.id, 'approval.required',
           jsonb_build_object('approval_id', NEW.id, 'run_id', NEW.execution_id,
                              'agent_id', e.agent_id, 'schedule_id', e.schedule_id,
                              'tool', NEW.tool, 'status', NEW.status)
      FROM webhooks w
      LEFT JOIN executions e ON e.id = NEW.execution_id
     WHERE w.tenant_id = NEW.tenant_id AND 'approval.required' = ANY (w.events);
    PERFORM pg_notify('tickwork_webhooks', 'due');
    RETURN NULL;
END;
$$;

CREATE TRIGGER approvals_webhook_events
    AFTER INSERT ON approvals
    FOR EACH ROW EXECUTE FUNCTION webhooks_enqueue_approval_event();
