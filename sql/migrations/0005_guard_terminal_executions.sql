-- A terminal execution never changes state again: this is the fence that stops a worker that
-- outlived its deadline from overwriting the stale sweep's verdict, whatever the app code does.
-- The one exception is a run suspended for an approval (completed + breadcrumb 'suspended'),
-- which its resume may take back to running.
CREATE FUNCTION executions_refuse_terminal_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('completed', 'failed', 'cancelled')
       AND NEW.status IS DISTINCT FROM OLD.status
       AND NOT (OLD.status = 'completed' AND OLD.breadcrumb = 'suspended') THEN
        RAISE EXCEPTION 'execution % is already %; its state cannot change', OLD.id, OLD.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'executions_terminal_is_final';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER executions_terminal_is_final
    BEFORE UPDATE OF status ON executions
    FOR EACH ROW EXECUTE FUNCTION executions_refuse_terminal_change();
