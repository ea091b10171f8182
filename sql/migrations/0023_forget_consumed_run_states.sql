-- A run's saved state holds its waiting call's real arguments (secrets included). From now on
-- the resume that takes a state deletes it; states that earlier resumes read and left behind
-- are deleted here. Only a run still waiting for approval keeps its state.
DELETE FROM run_states s
 WHERE NOT EXISTS (SELECT 1 FROM executions e
                    WHERE e.id = s.execution_id
                      AND e.status = 'completed' AND e.breadcrumb = 'suspended');
