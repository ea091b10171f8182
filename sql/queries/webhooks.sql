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
