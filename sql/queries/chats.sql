-- name: insert_chat
-- A new chat with one of the tenant's agents (no row: no such agent of this tenant). Its
-- status is 'idle': no message has started a run yet.
INSERT INTO chats (id, tenant_id, agent_id, title)
SELECT %(id)s, a.tenant_id, a.id, %(title)s
  FROM agents a
 WHERE a.id = %(agent_id)s AND a.tenant_id = %(tenant_id)s
RETURNING *, 'idle'::text AS status, NULL::uuid AS run_id;

-- name: get_chat
-- One chat of the tenant with its status: 'busy' while the run of its newest message (the last
-- attempt of its retry chain) is queued or running, 'waiting' while that run waits for a
-- person, else 'idle'; run_id is that attempt.
SELECT c.*, l.id AS run_id,
       CASE WHEN l.id IS NULL OR NOT run_unfinished(l.status, l.breadcrumb) THEN 'idle'
            WHEN l.status = 'waiting' OR l.breadcrumb = 'suspended' THEN 'waiting'
            ELSE 'busy' END AS status
  FROM chats c
  LEFT JOIN LATERAL latest_attempt(c.last_run_id) l ON true
 WHERE c.id = %(id)s AND c.tenant_id = %(tenant_id)s;

-- name: list_chats
-- A tenant's chats newest first, optionally one agent's, a page before the cursor; each with
-- its status as get_chat words it.
SELECT c.*, l.id AS run_id,
       CASE WHEN l.id IS NULL OR NOT run_unfinished(l.status, l.breadcrumb) THEN 'idle'
            WHEN l.status = 'waiting' OR l.breadcrumb = 'suspended' THEN 'waiting'
            ELSE 'busy' END AS status
  FROM (SELECT * FROM chats
         WHERE tenant_id = %(tenant_id)s
           AND (%(agent_id)s::uuid IS NULL OR agent_id = %(agent_id)s::uuid)
           AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
         ORDER BY id DESC
         LIMIT %(limit)s) c
  LEFT JOIN LATERAL latest_attempt(c.last_run_id) l ON true
 ORDER BY c.id DESC;

-- name: list_chat_messages
-- A chat's messages in order, each with the last attempt of the run it started (whose answer
-- is the agent's reply). The chat was found as the tenant's first.
SELECT m.id, m.seq, m.text, m.run_id, m.created_at, l.id AS answered_by, l.answer,
       l.finished_at
  FROM chat_messages m
  LEFT JOIN LATERAL latest_attempt(m.run_id) l ON true
 WHERE m.chat_id = %(chat_id)s AND m.tenant_id = %(tenant_id)s
 ORDER BY m.seq;

-- name: insert_chat_message
-- A person's message and the run it starts, in one statement (start_chat_message, migration
-- 0082, which starts the run through start_agent_run like every run start by hand). One row;
-- result says what happened (see the function).
SELECT result, message_id, run_id, request_hash, busy_run_id, queued
  FROM start_chat_message(%(message_id)s::uuid, %(run_id)s::uuid, %(tenant_id)s::uuid,
                          %(chat_id)s::uuid, %(text)s::text, %(max_attempts)s::integer,
                          %(timeout_minutes)s::integer, %(input)s::jsonb,
                          %(idempotency_key)s::text, %(request_hash)s::text);

-- name: get_chat_message_by_idempotency_key
-- The message an earlier request with this Idempotency-Key posted, to replay it or refuse a
-- different body (read again when that request was still committing).
SELECT id AS message_id, run_id, request_hash FROM chat_messages
 WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s;

-- name: list_chat_history
-- What a chat's run is told came before its message (the worker, across tenants): the
-- chat's earlier messages in order, each with the answer of its run's last attempt. The run is
-- named by the first attempt of its chain.
SELECT m.seq, m.text, l.answer
  FROM chat_messages mine
  JOIN chat_messages m ON m.chat_id = mine.chat_id AND m.seq < mine.seq
  LEFT JOIN LATERAL latest_attempt(m.run_id) l ON true
 WHERE mine.run_id = %(run_id)s
 ORDER BY m.seq;
-- name: list_chat_runs
-- Every run of a chat in the order a reader sees them (its messages in order, each message's
-- attempts oldest first), from one message on: the chat stream follows them one after another.
SELECT m.seq, c.id, c.depth
  FROM chat_messages m
 CROSS JOIN LATERAL run_chain(m.run_id) c
 WHERE m.chat_id = %(chat_id)s AND m.seq >= %(from_seq)s
 ORDER BY m.seq, c.depth
 LIMIT %(limit)s;
