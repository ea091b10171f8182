-- name: delete_old_skipped_fires
-- One batch, found through skipped_fires_recorded_idx.
DELETE FROM skipped_fires
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM skipped_fires
                          WHERE recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s)
                          LIMIT %(limit)s));
