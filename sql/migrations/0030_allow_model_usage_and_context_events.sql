-- Two journal event types for the run loop: model_usage (the tokens one model call cost, as
-- the provider reported them: {alias, input_tokens, output_tokens}) and context_masked (the
-- provider said the conversation is too long, so older tool results were masked and that one
-- call retried once). The CHECK is replaced whole because a CHECK cannot be extended in place;
-- a later migration that adds a type must list these too.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check CHECK (type IN (
    'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
    'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete',
    'model_usage', 'context_masked'));
