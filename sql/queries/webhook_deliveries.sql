-- name: list_webhook_deliveries
-- A webhook's delivery log, newest first (ids are UUIDv7), a page before the cursor.
SELECT d.id, d.type, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at,
       d.last_status_code, d.last_error, d.delivered_at, d.created_at, d.data
  FROM webhook_deliveries d
  JOIN webhooks w ON w.id = d.webhook_id
 WHERE d.webhook_id = %(webhook_id)s AND w.tenant_id = %(tenant_id)s
   AND (%(cursor)s::uuid IS NULL OR d.id < %(cursor)s::uuid)
 ORDER BY d.id DESC
 LIMIT %(limit)s;

-- name: claim_webhook_deliveries
-- Due deliveries for this deliverer: locked so that others skip them, counted as an attempt
-- and pushed past the attempt's time (lease_seconds, longer than the HTTP timeout) in the same
-- committed statement. The POST happens after this transaction ends; if the deliverer dies
-- during it, the row is due again once the lease runs out (at least once).
WITH due AS (
    SELECT id FROM webhook_deliveries
     WHERE status = 'pending' AND next_attempt_at <= coalesce(%(now)s::timestamptz, now())
     ORDER BY next_attempt_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1,
       last_attempt_at = coalesce(%(now)s::timestamptz, now()),
       next_attempt_at = coalesce(%(now)s::timestamptz, now())
                         + make_interval(secs => %(lease_seconds)s)
  FROM due, webhooks w
 WHERE d.id = due.id AND w.id = d.webhook_id
RETURNING d.id, d.type, d.data, d.attempts, d.created_at, w.url, w.secret;

-- name: update_webhook_delivery_attempt
-- The outcome of one attempt. A 2xx delivers it; anything else schedules the next attempt
-- retry_seconds from now, or gives up once the delivery is older than the horizon (so retries
-- go on for at least that long). Fenced by the attempt number: a deliverer whose lease ran
-- out and whose row was claimed again does not overwrite the newer attempt's record.
UPDATE webhook_deliveries
   SET status = CASE WHEN %(delivered)s THEN 'delivered'
                     WHEN coalesce(%(now)s::timestamptz, now())
                          >= created_at + make_interval(secs => %(horizon_seconds)s)
                     THEN 'failed'
                     ELSE 'pending' END,
       delivered_at = CASE WHEN %(delivered)s THEN coalesce(%(now)s::timestamptz, now()) END,
       next_attempt_at = coalesce(%(now)s::timestamptz, now())
                         + make_interval(secs => %(retry_seconds)s),
       last_status_code = %(status_code)s,
       last_error = %(error)s
 WHERE id = %(id)s AND attempts = %(attempt)s AND status = 'pending'
RETURNING id, status, attempts, next_attempt_at;

-- name: delete_old_webhook_deliveries
-- Finished deliveries (delivered, or given up) older than keep_days, one batch.
DELETE FROM webhook_deliveries
 WHERE id = ANY (ARRAY(SELECT id FROM webhook_deliveries
                        WHERE status <> 'pending'
                          AND created_at < coalesce(%(now)s::timestamptz, now())
                                           - make_interval(days => %(keep_days)s)
                        LIMIT %(limit)s));
