"""Webhook delivery: signed POSTs of run and approval events from tickwork's own queue."""
