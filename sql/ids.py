"""Entity ids are UUIDv7: time-ordered, so new rows land at the right edge of every index."""

from uuid import UUID

from uuid_utils.compat import uuid7


def new_id() -> UUID:
    return uuid7()
