"""Tools: local ones run inside the worker; external ones come from vendor packages."""
