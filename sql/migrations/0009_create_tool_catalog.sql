-- The live tool catalog. Workers (and `tickwork migrate`) publish the tools they can run; the
-- API validates an agent's tool keys against it, so the API never imports worker code.
CREATE TABLE tool_catalog (
    key          text PRIMARY KEY,
    tool_class   text NOT NULL,
    is_local     boolean NOT NULL,
    description  text NOT NULL DEFAULT '',
    parameters   jsonb NOT NULL DEFAULT '{}',
    published_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tool_catalog_class_check CHECK (tool_class IN ('read', 'send', 'write', 'delete'))
);
