"""A small Server-Sent Events reader for tests: frames as (id, event, data) plus comments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import AsyncIterator

import httpx


@dataclass
class Frame:
    id: str | None
    event: str | None
    data: str
    comment: bool = False

    def json(self) -> dict:
        return json.loads(self.data)


async def frames(response: httpx.Response) -> AsyncIterator[Frame]:
    fields: dict[str, list[str]] = {}
    async for line in response.aiter_lines():
        if line == "":
            if fields:
                yield Frame(fields.get("id", [None])[-1], fields.get("event", [None])[-1],
                            "\n".join(fields.get("data", [])))
            fields = {}
        elif line.startswith(":"):
            yield Frame(None, None, line[1:].strip(), comment=True)
        else:
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
