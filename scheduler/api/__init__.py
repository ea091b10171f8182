"""The HTTP API (FastAPI): routes over the scheduler's services, the SSE tail and its hub."""
