-- name: insert_webhook
-- A tenant's new receiver, unless it already has the most a tenant may have (each one is a
-- delivery row per event, written on the hot path). No row back means the limit was reached.
INSERT INTO webhooks (id, tenant_id, url, events, secret)
SELECT %(id)s, %(tenant_id)s, %(url)s, %(events)s, %(secret)s
 WHERE (SELECT count(*) FROM webhooks WHERE tenant_id = %(tenant_id)s) < %(max_per_tenant)s
RETURNING id, url, events, created_at;

-- name: list_webhooks
-- A tenant's webhooks oldest first, a page after the cursor (never the secret).
SELECT id, url, events, created_at
  FROM webhooks
 WHERE tenant_id = %(tenant_id)s
   AND (%(cursor)s::uuid IS NULL OR id > %(cursor)s::uuid)
 ORDER BY id
 LIMIT %(limit)s;

-- name: get_webhook
-- One of the tenant's webhooks (another tenant's is not found).
SELECT id, url, events, created_at
  FROM webhooks
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: delete_webhook
-- Remove a webhook and, by the foreign key's cascade, its deliveries (pending ones included:
-- nothing more is sent to it).
DELETE FROM webhooks
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING id;

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

-- name: record_webhook_attempt
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

-- name: prune_webhook_deliveries
-- Finished deliveries (delivered, or given up) older than keep_days, one batch.
DELETE FROM webhook_deliveries
 WHERE id = ANY (ARRAY(SELECT id FROM webhook_deliveries
                        WHERE status <> 'pending'
                          AND created_at < coalesce(%(now)s::timestamptz, now())
                                           - make_interval(days => %(keep_days)s)
                        LIMIT %(limit)s));

-- name: listen_for_webhooks
-- The enqueue triggers (migration 0034) notify here at commit.
LISTEN tickwork_webhooks;
