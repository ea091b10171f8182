"""Vendor packages: each subpackage is a vendor, each @tool function in it a tool."""
