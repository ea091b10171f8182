-- One journal event type for long conversations: context_compacted (the older part of the
-- conversation was summarised by the model and replaced by the summary in what is sent:
-- {ok, reason, alias, messages_summarised, messages_kept, summary_chars,
-- before_tokens_estimate, after_tokens_estimate, freed_tokens_estimate}, or {ok: false, error}
-- when the summariser failed). The CHECK is replaced whole, as in 0030: a later migration that
-- adds a type must list these too.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check CHECK (type IN (
    'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
    'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete',
    'model_usage', 'context_masked', 'context_compacted'));
