-- Numbers over time for the viewer's chart. Read-only; every block is one tenant's.

-- name: runs_per_minute
-- Runs created in each minute from %(since)s on, counted by how they ended: the outcome once
-- there is one, else `waiting` (an approval is pending) or the status (queued, running).
-- The id bound lets the (tenant_id, id) index range-scan an hour instead of the tenant's whole
-- history (ids are UUIDv7: their first 48 bits are the creating process's clock in ms); it
-- starts 10 minutes early so an API host whose clock runs behind the database's loses nothing,
-- and created_at (the database's clock) decides.
SELECT date_trunc('minute', created_at) AS minute,
       coalesce(outcome, CASE WHEN breadcrumb = 'suspended' THEN 'waiting' ELSE status END)
           AS outcome,
       count(*) AS runs
  FROM executions
 WHERE tenant_id = %(tenant_id)s
   AND id >= (SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
                FROM (SELECT lpad(to_hex((extract(epoch FROM %(since)s::timestamptz
                                                  - interval '10 minutes') * 1000)::bigint),
                                  12, '0') AS h) AS bound)
   AND created_at >= %(since)s::timestamptz
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- name: stats_minute_now
-- The current minute by the database clock (or the caller's), where the chart's window ends.
SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())) AS minute;
