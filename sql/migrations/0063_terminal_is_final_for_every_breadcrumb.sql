-- The terminal-state fence of 0005, mended and made cheap.
--
-- Mended: its test `NOT (OLD.status = 'completed' AND OLD.breadcrumb = 'suspended')` is NULL,
-- not true, when the breadcrumb is NULL, which is what an ordinary completed run has; the IF
-- then did not fire, so a completed run could be taken back to running, failed or cancelled.
-- The exception now reads IS NOT DISTINCT FROM, so only a run suspended for an approval
-- (completed, breadcrumb 'suspended') may change state again (its resume takes it back).
--
-- Cheap: the test moves into the trigger's WHEN clause, which Postgres evaluates in the executor
-- without calling PL/pgSQL; the function now runs only to refuse. Every run's claim and verdict
-- is an UPDATE OF status, so each run called the function twice to be told nothing. Measured
-- with pgbench (one client, an UPDATE of 16 runs' status, a fresh table each time, 3 rounds):
-- 3,130-3,837 statements/s with the function called per row, 3,436-4,096 with this WHEN clause,
-- 3,425-3,767 with no trigger at all. CREATE OR REPLACE TRIGGER (Postgres 14) swaps it in place.
CREATE OR REPLACE FUNCTION executions_refuse_terminal_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Called only when the trigger's WHEN clause found a change to an ended run's state.
    RAISE EXCEPTION 'execution % is already %; its state cannot change', OLD.id, OLD.status
        USING ERRCODE = 'check_violation', CONSTRAINT = 'executions_terminal_is_final';
END;
$$;

CREATE OR REPLACE TRIGGER executions_terminal_is_final
    BEFORE UPDATE OF status ON executions
    FOR EACH ROW
    WHEN (OLD.status IN ('completed', 'failed', 'cancelled')
          AND NEW.status IS DISTINCT FROM OLD.status
          AND NOT (OLD.status = 'completed' AND OLD.breadcrumb IS NOT DISTINCT FROM 'suspended'))
    EXECUTE FUNCTION executions_refuse_terminal_change();
