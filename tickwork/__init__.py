"""The composition root: the `tickwork` command and `tickwork up`. Wiring only."""
