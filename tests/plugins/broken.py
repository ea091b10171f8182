"""A plugin vendor module that raises while it is imported (a missing dependency, a typo)."""

raise RuntimeError("this plugin needs a setting that is not there")
