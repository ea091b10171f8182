"""The execution side. Issue 2 ships the tool catalog (what agents may name); the agent loop,
claims and walls arrive with the worker issue."""
