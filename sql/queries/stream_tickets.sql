-- name: insert_stream_ticket
-- A single-use ticket for one run's event stream, tied to the token that asked for it.
INSERT INTO stream_tickets (ticket_hash, tenant_id, execution_id, token_id, expires_at)
VALUES (%(ticket_hash)s, %(tenant_id)s, %(execution_id)s, %(token_id)s,
        now() + make_interval(secs => %(ttl_seconds)s))
RETURNING expires_at;

-- name: delete_usable_stream_ticket
-- Single use: the first request that presents the ticket deletes it, atomically, so a copied
-- URL is worth nothing once the stream has opened. A ticket whose token has since been
-- revoked or has expired is refused (and left for retention to forget).
DELETE FROM stream_tickets s
 USING api_tokens t
 WHERE s.ticket_hash = %(ticket_hash)s AND s.execution_id = %(execution_id)s
   AND s.expires_at > now()
   AND t.id = s.token_id AND t.revoked_at IS NULL
   AND (t.expires_at IS NULL OR t.expires_at > now())
RETURNING s.tenant_id, s.execution_id, s.token_id;

-- name: delete_expired_stream_tickets
-- Forget tickets that expired over an hour ago (a used ticket is already gone).
DELETE FROM stream_tickets WHERE expires_at < now() - interval '1 hour';
