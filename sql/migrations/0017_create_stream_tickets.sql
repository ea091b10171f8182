-- A browser's EventSource cannot send an Authorization header, and an operator token must not
-- travel in a URL. A stream ticket is short-lived, scoped to one run of one tenant, stored
-- hashed, and good only for reading that run's journal.
CREATE TABLE stream_tickets (
    ticket_hash  bytea PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    execution_id uuid NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX stream_tickets_expiry_idx ON stream_tickets (expires_at);
