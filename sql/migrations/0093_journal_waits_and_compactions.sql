-- Both event types of the third round's run loop in one CHECK: provider_wait (a model outage
-- waited out, 0073) and context_compacted (a long conversation summarised, 0085). Each of
-- those migrations replaced the CHECK whole with its own list, so the later one dropped the
-- other's type; this lists every type (0030 says why the CHECK is replaced whole). A later
-- migration that adds a type must list these too.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check CHECK (type IN (
    'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
    'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete',
    'model_usage', 'context_masked', 'provider_wait', 'context_compacted'));
