"""The execution side: claiming runs, the agent loop with its walls and stop gate, approvals,
model providers, tools and the webhook deliverer. It never imports `scheduler`."""
