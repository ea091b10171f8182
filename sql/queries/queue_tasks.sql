-- name: claim_resume_tasks
-- Lease up to %(limit)s resume and unpark tasks (a run taken back after a person's decision, or
-- after a model outage's wait): ready ones first, then ones whose lease expired (a worker died
-- before taking the run back). Only these are leased: a fresh run is started by
-- claim_queued_executions alone. Each half reads its own partial index; SKIP LOCKED keeps workers
-- apart.
WITH ready AS (
    SELECT name FROM queue_tasks
     WHERE kind IN ('resume', 'unpark') AND lease_expires_at IS NULL AND available_at <= now()
     ORDER BY available_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT name FROM queue_tasks
     WHERE kind IN ('resume', 'unpark') AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT name FROM ready UNION ALL SELECT name FROM expired
     LIMIT %(limit)s
)
UPDATE queue_tasks q
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       deliveries = q.deliveries + 1
  FROM picked AS p
 WHERE q.name = p.name
RETURNING q.name, q.kind, q.execution_id, q.deliveries;
