"""The HTTP API (FastAPI): agents, schedules, run now, runs, tick, health, metrics."""
