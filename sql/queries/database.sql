-- Statements with no table of their own: the session's settings, NOTIFYs and LISTENs, the clock, and
-- the reads and upkeep that span tables (metrics, retention's one call).

-- name: set_tenant_scope
-- Row-level security's key for this transaction only (migration 0031): the tenant it works for.
SELECT set_config('app.tenant_id', %(tenant_id)s::text, true);

-- name: set_all_tenants_scope
-- This transaction spans tenants by design (the tick, metrics, the tail's hub).
SELECT set_config('app.all_tenants', 'on', true);

-- name: set_partition_lock_timeout
-- Partition DDL locks the whole journal; waiting for that lock would queue every append behind
-- it, so it waits this long at most (the rest of the transaction is the function call).
SELECT set_config('lock_timeout', %(lock_timeout)s, true);

-- name: get_database_now
-- The database's clock: the one clock schedules are computed against (app hosts' clocks drift).
SELECT now() AS now;

-- name: get_current_minute
-- The current minute by the database clock (or the caller's), where the chart's window ends.
SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())) AS minute;

-- name: notify_channels
-- Wake-ups after the commits they announce (sql/notify.py), one NOTIFY per (channel, payload),
-- in a transaction of its own that writes nothing: it holds the notify lock only for itself.
SELECT count(pg_notify(n.channel, n.payload)) AS sent
  FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS n(channel, payload);

-- name: listen_for_tasks
-- Workers wake on this channel when a run or resume task is queued (NOTIFY at commit).
LISTEN tickwork_tasks;

-- name: listen_for_events
-- The tail's hub wakes on this channel when a run's journal grows or the run ends.
LISTEN tickwork_events;

-- name: listen_for_webhooks
-- The enqueue triggers (migration 0034) notify here at commit.
LISTEN tickwork_webhooks;

-- name: get_metric_gauges
-- The scalar gauges of one scrape, in one round trip; each subquery reads a partial index or a
-- bounded range.
--   queue_*: unleased tasks, from queue_tasks_ready_idx (a task leased by a worker is not
--     waiting); an available_at in the future is not "old", hence greatest(0, ...).
--   due_lag_max: how late the tick wrote the cron fires of the last 5 minutes. Ids are UUIDv7
--     (time-ordered), so the primary key reads only the newest rows: the floor is the id of a
--     moment 15 minutes ago, which leaves room for an app clock that lags the database's.
--     Retries are left out: they stand for an old fire on purpose.
--   oldest_transaction_age: client sessions of this database, this scrape excluded. A long
--     open transaction holds back vacuum of the queue and journal tables.
--   workers_present: worker processes holding their presence lock on this database (the
--     view worker_presences, migration 0064): a dead worker's lock goes with its session.
SELECT
    (SELECT count(*) FROM queue_tasks WHERE lease_expires_at IS NULL) AS queue_depth,
    (SELECT greatest(0, coalesce(extract(epoch FROM now() - min(available_at)), 0))
       FROM queue_tasks WHERE lease_expires_at IS NULL) AS queue_oldest_age_seconds,
    (SELECT count(*) FROM approvals WHERE status = 'pending') AS approvals_pending,
    (SELECT greatest(0, coalesce(max(extract(epoch FROM created_at - scheduled_for)), 0))
       FROM executions
      WHERE id >= (lpad(to_hex(floor(extract(epoch FROM now() - interval '15 minutes')
                                     * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid
        AND created_at >= now() - interval '5 minutes'
        AND trigger_source = 'cron'
        AND retry_of IS NULL) AS due_lag_max_seconds,
    (SELECT greatest(0, coalesce(extract(epoch FROM now() - min(xact_start)), 0))
       FROM pg_stat_activity
      WHERE datname = current_database()
        AND backend_type = 'client backend'
        AND pid <> pg_backend_pid()
        AND xact_start IS NOT NULL) AS oldest_transaction_age_seconds,
    (SELECT count(*) FROM worker_presences) AS workers_present;

-- name: delete_expired_history
-- The HTTP tick's retention (the API's role): one batch of everything above in one narrow
-- function on the database clock (migrations 0029, 0037).
SELECT retention_upkeep(%(days)s, %(limit)s) AS deleted;

-- name: hold_worker_presence
-- A worker's presence, held on its LISTEN connection for as long as the process lives: a
-- session advisory lock that Postgres drops with the session, so the sweep can tell a run lost
-- with its worker from a run that timed out (migration 0064). Never waits: false when another
-- session holds it (a worker id given twice), and then the worker runs without one.
SELECT pg_try_advisory_lock(%(key)s, hashtext(%(worker_id)s)) AS held;
