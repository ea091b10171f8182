"""Not a server: exits at once, as a server with a missing dependency or bad arguments does."""

import sys

sys.exit("refuses: cannot start")
