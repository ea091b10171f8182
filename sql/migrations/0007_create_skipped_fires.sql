-- Every cron fire that did not get an execution of its own leaves a row here: coalesced into a
-- later fire after downtime (execution_id = the run that stands for it), skipped because the
-- previous run was still unfinished (execution_id = that run), or skipped while the agent was
-- paused or a draft. No foreign keys: history outlives schedules until retention removes it.
CREATE TABLE skipped_fires (
    schedule_id   uuid NOT NULL,
    scheduled_for timestamptz NOT NULL,
    tenant_id     uuid NOT NULL,
    reason        text NOT NULL,
    execution_id  uuid,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, scheduled_for),
    CONSTRAINT skipped_fires_reason_check CHECK (reason IN ('coalesced', 'overlap', 'agent_inactive'))
);
CREATE INDEX skipped_fires_recorded_idx ON skipped_fires (recorded_at);
