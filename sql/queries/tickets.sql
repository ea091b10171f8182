-- name: insert_stream_ticket
INSERT INTO stream_tickets (ticket_hash, tenant_id, execution_id, expires_at)
VALUES (%(ticket_hash)s, %(tenant_id)s, %(execution_id)s,
        now() + make_interval(secs => %(ttl_seconds)s))
RETURNING expires_at;

-- name: find_stream_ticket
SELECT tenant_id, execution_id FROM stream_tickets
 WHERE ticket_hash = %(ticket_hash)s AND execution_id = %(execution_id)s AND expires_at > now();

-- name: delete_expired_stream_tickets
DELETE FROM stream_tickets WHERE expires_at < now() - interval '1 hour';
