"""``python -m forgepatch``."""

from forgepatch.cli import entry

entry()
