"""A plugin vendor module without a single @tool function."""


async def helper() -> None:
    """Not a tool: nothing marks it."""
