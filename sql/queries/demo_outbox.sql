-- name: insert_demo_outbox_message
-- The demo vendor's send_message tool: a message lands in the outbox, where a test or a person
-- reads it.
INSERT INTO demo_outbox (id, execution_id, recipient, text)
VALUES (%(id)s, %(execution_id)s, %(recipient)s, %(text)s)
RETURNING id;
