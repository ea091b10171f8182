-- A person's stop: a queued run is cancelled at once; a running one is asked to stop, and its
-- worker ends it at the next turn boundary (after a hard budget stop, which takes precedence).
ALTER TABLE executions ADD COLUMN cancel_requested_at timestamptz;
