"""What a chat's run is told came before its message: the chat's earlier exchange.

A chat's run (input.chat_id set by the API) starts from the agent's instructions, then the
chat's earlier messages in order (each person's text, then the agent's answer to it: the answer
of that message's run, as stored on the run, already redacted), then its own message. What the
earlier runs' tools returned is not replayed: each answer stands for its run. One statement,
only for chat runs; a run that merely carries a chat_id in its input but was not started by a
chat message finds no history (the chat is found through the message that started the run).
"""

from __future__ import annotations

from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.worker.model import Message


def is_chat_run(run_input: dict) -> bool:
    return isinstance(run_input.get("chat_id"), str)


async def chat_history(pool: AsyncConnectionPool, first_run_id: UUID) -> list[Message]:
    """The chat's messages before the one that started this run chain (named by its first
    attempt), as the model reads them."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(QUERIES["list_chat_history"],
                                          {"run_id": first_run_id})).fetchall()
    said: list[Message] = []
    for row in rows:
        said.append(Message("user", row["text"]))
        if row["answer"]:
            said.append(Message("assistant", row["answer"]))
    return said
