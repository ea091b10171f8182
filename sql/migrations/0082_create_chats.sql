-- Chats, the third trigger: a durable thread of one agent. Each message a person posts starts
-- one run (trigger_type 'chat') through start_agent_run (0060), the statement every run start
-- by hand uses: the execution row and its queue task in one statement, so walls, gate,
-- approvals, journal, budgets, webhooks and retries apply unchanged. The agent's side of the
-- thread is not stored twice: it is the answer of each message's run (executions.answer, 0081),
-- read from the last attempt of the run's retry chain.
--
-- agent_id carries no foreign key, as on executions: a chat's history outlives its agent.
-- origin_run_id is the run a chat continues (a reply to a run that ended with a question): its
-- history starts with that run's conversation. last_run_id is the run of the newest message
-- (its first attempt); a message while that run's chain is unfinished is refused (chat_busy).
CREATE TABLE chats (
    id               uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent_id         uuid NOT NULL,
    title            text,
    origin_run_id    uuid,
    last_message_seq integer NOT NULL DEFAULT 0,
    last_run_id      uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chats_tenant_listing_idx ON chats (tenant_id, id DESC);
CREATE INDEX chats_agent_listing_idx ON chats (tenant_id, agent_id, id DESC);

-- A person's message, numbered in its chat, and the run it started (the first attempt).
CREATE TABLE chat_messages (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    chat_id         uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    seq             integer NOT NULL,
    text            text NOT NULL,
    run_id          uuid NOT NULL,
    idempotency_key text,
    request_hash    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chat_messages_seq_positive CHECK (seq >= 1),
    UNIQUE (chat_id, seq)
);
CREATE UNIQUE INDEX chat_messages_run_idx ON chat_messages (run_id);
CREATE UNIQUE INDEX chat_messages_idempotency_key_idx ON chat_messages (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE chats ENABLE ROW LEVEL SECURITY;
ALTER TABLE chat_messages ENABLE ROW LEVEL SECURITY;

-- The attempts of a run's retry chain, oldest first (depth 0 is the run itself; a retry is the
-- one execution whose retry_of is the attempt before it: executions_one_retry_idx). A chat's
-- stream follows every attempt in turn. SECURITY INVOKER: the caller's row-level security
-- applies.
CREATE FUNCTION run_chain(first_run uuid) RETURNS TABLE (id uuid, depth integer)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE chain (id, depth) AS (
        SELECT e.id, 0 FROM executions e WHERE e.id = first_run
        UNION ALL
        SELECT n.id, c.depth + 1 FROM chain c JOIN executions n ON n.retry_of = c.id
         WHERE c.depth < 1000
    )
    SELECT chain.id, chain.depth FROM chain
$$;

-- The last attempt of a run's retry chain, or a row of NULLs when the run is gone: a chat
-- shows that attempt's answer and waits for that attempt to finish.
CREATE FUNCTION latest_attempt(first_run uuid) RETURNS executions
LANGUAGE sql STABLE AS $$
    SELECT e.* FROM executions e
     WHERE e.id = (SELECT c.id FROM run_chain(first_run) c ORDER BY c.depth DESC LIMIT 1)
$$;

-- Whether a run is unfinished as a chat sees it: queued, running, or waiting for a person
-- (completed with breadcrumb 'suspended'). Written as "not ended" so that any state added
-- later (a run parked, a status of its own for waiting) counts as unfinished.
CREATE FUNCTION run_unfinished(run_status text, run_breadcrumb text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NOT (run_status IN ('completed', 'failed', 'cancelled')
                AND run_breadcrumb IS DISTINCT FROM 'suspended')
$$;

-- start_chat_message: a person's message to a chat and the run it starts, in one statement and
-- one transaction. The chat row is held FOR UPDATE first, so two messages to one chat take
-- turns; each later statement of this function takes a fresh snapshot (READ COMMITTED, a
-- VOLATILE function), so the second sees the first's run once the first has committed and is
-- refused: exactly one of two concurrent messages starts a run. In order:
--   no such chat of this tenant            -> result 'no_chat'
--   the Idempotency-Key was used in a message -> 'replayed' (that message; the caller compares
--                                              request_hash to refuse a different body)
--   the chat's last run is unfinished       -> 'busy' (busy_run_id: its unfinished attempt)
--   the run start (start_agent_run, 0060, the one statement every run start by hand uses):
--     no such agent                         -> 'no_agent'
--     the agent is paused                   -> 'paused'
--     the key was used by another request   -> 'key_used' (run_id, request_hash of that run)
--     a same-key request still committing   -> 'key_racing' (the caller reads again)
--     queued                                -> 'started' (the message numbered after the last)
-- It notifies nobody: the caller wakes workers once the transaction has committed.
-- SECURITY INVOKER: the caller's privileges and row-level security apply.
CREATE FUNCTION start_chat_message(new_message_id uuid, new_run_id uuid, run_tenant_id uuid,
                                   message_chat_id uuid, message_text text,
                                   run_max_attempts integer, run_timeout_minutes integer,
                                   run_input jsonb, message_idempotency_key text,
                                   message_request_hash text)
RETURNS TABLE (result text, message_id uuid, run_id uuid, request_hash text,
               busy_run_id uuid, queued bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    chat chats%ROWTYPE;
    earlier chat_messages%ROWTYPE;
    unfinished uuid;
    started record;
BEGIN
    SELECT * INTO chat FROM chats c
     WHERE c.id = message_chat_id AND c.tenant_id = run_tenant_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_chat'::text, NULL::uuid, NULL::uuid, NULL::text, NULL::uuid,
                            0::bigint;
        RETURN;
    END IF;
    IF message_idempotency_key IS NOT NULL THEN
        SELECT * INTO earlier FROM chat_messages m
         WHERE m.tenant_id = run_tenant_id AND m.idempotency_key = message_idempotency_key;
        IF FOUND THEN
            RETURN QUERY SELECT 'replayed'::text, earlier.id, earlier.run_id,
                                earlier.request_hash, NULL::uuid, 0::bigint;
            RETURN;
        END IF;
    END IF;
    IF chat.last_run_id IS NOT NULL THEN
        SELECT l.id INTO unfinished FROM latest_attempt(chat.last_run_id) l
         WHERE l.id IS NOT NULL AND run_unfinished(l.status, l.breadcrumb);
        IF unfinished IS NOT NULL THEN
            RETURN QUERY SELECT 'busy'::text, NULL::uuid, NULL::uuid, NULL::text, unfinished,
                                0::bigint;
            RETURN;
        END IF;
    END IF;
    SELECT s.agent_status, s.queued, s.created, (s.run).id AS id,
           (s.run).request_hash AS request_hash
      INTO started
      FROM start_agent_run(new_run_id, run_tenant_id, chat.agent_id, NULL, 'chat', 'api',
                           run_max_attempts, run_timeout_minutes, run_input,
                           message_idempotency_key, message_request_hash) s;
    IF started.agent_status IS NULL THEN
        RETURN QUERY SELECT 'no_agent'::text, NULL::uuid, NULL::uuid, NULL::text, NULL::uuid,
                            0::bigint;
        RETURN;
    END IF;
    IF started.created IS DISTINCT FROM true THEN
        RETURN QUERY SELECT CASE WHEN started.created = false THEN 'key_used'
                                 WHEN started.agent_status = 'paused' THEN 'paused'
                                 ELSE 'key_racing' END,
                            NULL::uuid, started.id, started.request_hash, NULL::uuid, 0::bigint;
        RETURN;
    END IF;
    INSERT INTO chat_messages (id, tenant_id, chat_id, seq, text, run_id, idempotency_key,
                               request_hash)
    VALUES (new_message_id, run_tenant_id, chat.id, chat.last_message_seq + 1, message_text,
            new_run_id, message_idempotency_key, message_request_hash);
    UPDATE chats SET last_message_seq = chat.last_message_seq + 1, last_run_id = new_run_id,
                     updated_at = now()
     WHERE id = chat.id;
    RETURN QUERY SELECT 'started'::text, new_message_id, new_run_id, message_request_hash,
                        NULL::uuid, started.queued;
END;
$$;
