"""The machine's IANA time zone, for converting what the user types into UTC crons."""

from __future__ import annotations

import os
from pathlib import Path


def machine_zone() -> str:
    """TZ if set to a zone name, else the target of /etc/localtime, else UTC."""
    configured = os.environ.get("TZ", "").lstrip(":")
    if configured and "/" in configured or configured == "UTC":
        return configured
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:
        return "UTC"
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"
