"""An example tickwork vendor plugin (see tools.py)."""
