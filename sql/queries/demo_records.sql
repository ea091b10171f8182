-- name: get_demo_record
-- The demo vendor's get_record tool: one record by id.
SELECT id, title, category, body FROM demo_records WHERE id = %(id)s;

-- name: list_demo_records
-- The demo vendor's list_records tool: a page of records by id.
SELECT id, title, category, body FROM demo_records ORDER BY id OFFSET %(offset)s LIMIT %(limit)s;

-- name: list_demo_records_matching
-- strpos, not LIKE: the query is plain text, so % and _ in it match themselves.
SELECT id, title, category, body FROM demo_records
 WHERE strpos(lower(title || ' ' || category || ' ' || body), lower(%(query)s)) > 0
 ORDER BY id LIMIT %(limit)s;
