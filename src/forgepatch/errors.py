"""Errors that map onto the CLI's exit-code contract (0 ok, 1 drift/failure, 2 bad input)."""

from __future__ import annotations


class ForgepatchError(Exception):
    """Base class: ``str(err)`` is the one-line message shown to the user."""

    exit_code = 2


class BadInput(ForgepatchError):
    """Usage, config, unreadable or unparseable input: exit 2."""

    exit_code = 2


class Failure(ForgepatchError):
    """Drift, a failed check, a failed smoke job, a refused release: exit 1."""

    exit_code = 1


def located(path: object, line: int | None, message: str) -> str:
    """Format ``file:line: message`` (line optional)."""
    return f"{path}:{line}: {message}" if line else f"{path}: {message}"
