-- Tool results too large for the message history (over ~4,000 characters) live here; the
-- model gets a preview and a file reference it can read or query with SQL (query_file).
CREATE TABLE tool_results (
    file_ref     text PRIMARY KEY,
    execution_id uuid NOT NULL,
    tool         text NOT NULL,
    content      jsonb NOT NULL,
    chars        integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_results_execution_idx ON tool_results (execution_id);
