"""Vendor modules the plugin tests point entry points at (worker/tools/plugins.py)."""
