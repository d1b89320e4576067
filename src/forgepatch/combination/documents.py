"""Versioned JSON documents (smoke results, build records, release's pending registry tags):
one reader for all of them.

Each document names its schema as ``family/N`` (under ``schema``, or ``format`` for the
release records); a reader accepts its family up to the version it knows and refuses
anything else with one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from forgepatch.errors import BadInput

M = TypeVar("M", bound=BaseModel)


def read(path: Path | str, data: bytes, *, schema: str, what: str, list_key: str, writer: str,
         default_schema: str | None = None, key: str = "schema", container: type = list) -> dict[str, Any]:
    """Decode ``data`` as a ``what`` of ``schema``'s family: a dict naming it under ``key``,
    with a ``list_key`` of type ``container`` (a list; a dict for a table keyed by name).
    ``default_schema`` stands in for a missing ``key`` (documents older than it)."""
    family, _, known = schema.rpartition("/")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise BadInput(f"{path}: not a {what} ({why})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(list_key), container):
        kind = "list" if container is list else "table"
        raise BadInput(f"{path}: not a {what} (no '{list_key}' {kind}; write it with `{writer}`)")
    if default_schema is not None:
        doc.setdefault(key, default_schema)
    got = doc.get(key, "")
    got_family, _, version = str(got).rpartition("/")
    if got_family != family or not version.isdigit():
        raise BadInput(f"{path}: schema {got!r} is not a {what} schema ({family}/N)")
    if int(version) > int(known):
        raise BadInput(f"{path}: schema {got} is newer than this forgepatch reads ({schema}); upgrade forgepatch")
    return doc


def validate(model: type[M], doc: dict[str, Any], path: Path | str, what: str) -> M:
    """``model`` from ``doc``; the first validation error as one line naming the file."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BadInput(f"{path}: not a {what} ({where}: {err['msg']})") from None
