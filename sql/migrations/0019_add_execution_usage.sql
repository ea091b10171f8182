-- What a run spent on the model: tokens in and out and the number of model calls. Written with
-- the run's verdict (finish_runs) and at a suspension (suspend_for_approval); a resumed run
-- carries its running total in its state, so its later finish writes the whole run's usage.
ALTER TABLE executions
    ADD COLUMN usage jsonb NOT NULL
        DEFAULT '{"input_tokens": 0, "output_tokens": 0, "model_calls": 0}';
