"""The scheduling side: cron math, the minute tick, the stale sweep and the HTTP API."""
