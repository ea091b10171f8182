-- Webhooks: a tenant's receivers, and the queue of deliveries to them.
--
-- webhooks holds each receiver's URL, the events it wants and the secret that signs every
-- delivery. The secret is stored as it is (not hashed): the deliverer must sign with it. Only
-- the deliverer's role may read that column (sql/grants.sql); the API writes it once and shows
-- it once, in the answer to the POST that made it.
--
-- webhook_deliveries is tickwork's own delivery queue, one row per (event, webhook). A row is
-- inserted by a trigger in the same transaction as the state change it reports (0034), so an
-- event cannot be lost between a run's end and its notification. Its id is the delivery's
-- Tickwork-Delivery header, the same on every retry: receivers deduplicate by it. A row moves
-- pending -> delivered (a 2xx) or pending -> failed (still refused 24 hours after it was made);
-- a deliverer claims due rows with FOR UPDATE SKIP LOCKED and pushes next_attempt_at past its
-- HTTP timeout while it tries, so a deliverer that dies mid-attempt leaves a row that is simply
-- due again later (at least once).
CREATE TABLE webhooks (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url        text NOT NULL,
    events     text[] NOT NULL,
    secret     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhooks_events_known CHECK (cardinality(events) >= 1 AND events <@
        ARRAY['approval.required', 'run.failed', 'run.completed', 'run.cancelled']::text[]),
    CONSTRAINT webhooks_url_http CHECK (url ~ '^https?://' AND length(url) <= 2000)
);
-- The enqueue trigger asks "does this tenant have a webhook?" for every finished run.
CREATE INDEX webhooks_tenant_idx ON webhooks (tenant_id);

CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY,
    webhook_id       uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    type             text NOT NULL,
    data             jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz,
    last_status_code integer,
    last_error       text,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_type_check CHECK (type IN
        ('approval.required', 'run.failed', 'run.completed', 'run.cancelled')),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed'))
);
-- The deliverer's scan reads pending rows only; the log is read per webhook, newest first.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log_idx ON webhook_deliveries (webhook_id, id DESC);
CREATE INDEX webhook_deliveries_done_idx ON webhook_deliveries (created_at)
    WHERE status <> 'pending';
