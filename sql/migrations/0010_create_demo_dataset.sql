-- The demo vendor's data: 1,200 deterministic records to read, and an outbox that
-- demo.send_message writes to, so exactly-once delivery can be counted.
CREATE TABLE demo_records (
    id       integer PRIMARY KEY,
    title    text NOT NULL,
    category text NOT NULL,
    body     text NOT NULL
);
INSERT INTO demo_records (id, title, category, body)
SELECT i,
       format('Record %s', i),
       (ARRAY['invoice', 'ticket', 'order', 'lead', 'incident'])[1 + i % 5],
       format('Record %s is a %s opened on day %s; priority %s.',
              i, (ARRAY['invoice', 'ticket', 'order', 'lead', 'incident'])[1 + i % 5],
              1 + i % 28, 1 + i % 4)
  FROM generate_series(1, 1200) AS i;

CREATE TABLE demo_outbox (
    id           uuid PRIMARY KEY,
    execution_id uuid,
    recipient    text NOT NULL,
    text         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
