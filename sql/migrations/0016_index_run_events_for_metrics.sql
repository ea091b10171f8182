-- The metrics scrape counts the last hour's wall refusals and gate decisions. These two event
-- types are a small share of the journal, so a partial index on their timestamps keeps that
-- count proportional to the last hour's refusals and decisions, not to the journal's size.
-- Created on the partitioned parent, it is built on every partition, present and future.
CREATE INDEX run_events_metrics_ts_idx ON run_events (ts)
    WHERE type IN ('budget_refusal', 'gate_decision');
