-- A run parked through a model outage (worker/outage.py) keeps status 'running' with the
-- breadcrumb 'parked', no run token and no deadline (the sweep judges only running runs past a
-- deadline, so a parked one is never swept); its state is saved in run_states, and an 'unpark'
-- task, named 'unpark:<execution id>', whose available_at is the retry time, takes it back
-- (claim_unparked_execution). No worker holds it meanwhile.
ALTER TABLE queue_tasks DROP CONSTRAINT queue_tasks_kind_check;
ALTER TABLE queue_tasks ADD CONSTRAINT queue_tasks_kind_check
    CHECK (kind IN ('run', 'resume', 'unpark'));
