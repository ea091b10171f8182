-- name: demo_get_record
SELECT id, title, category, body FROM demo_records WHERE id = %(id)s;

-- name: demo_list_records
SELECT id, title, category, body FROM demo_records ORDER BY id OFFSET %(offset)s LIMIT %(limit)s;

-- name: demo_search_records
-- strpos, not LIKE: the query is plain text, so % and _ in it match themselves.
SELECT id, title, category, body FROM demo_records
 WHERE strpos(lower(title || ' ' || category || ' ' || body), lower(%(query)s)) > 0
 ORDER BY id LIMIT %(limit)s;

-- name: demo_send_message
INSERT INTO demo_outbox (id, execution_id, recipient, text)
VALUES (%(id)s, %(execution_id)s, %(recipient)s, %(text)s)
RETURNING id;
