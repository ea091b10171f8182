-- Retention walks finished runs oldest first through this index, a batch at a time, instead of
-- scanning executions for rows past the horizon. Partial: queued and running runs (no
-- finished_at) are never retention's business, so they cost the index nothing.
CREATE INDEX executions_finished_idx ON executions (finished_at) WHERE finished_at IS NOT NULL;
