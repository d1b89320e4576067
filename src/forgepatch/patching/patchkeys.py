"""The checks of a patch file's values (a TOML table or a ``PATCH`` dict): each returns the
value or raises ``ValueError("key: message")``, the key naming where (``sites[0].markers``),
so the loader can name the file and line. Shared by the patch loader (``patchset``) and the
file kinds (``codemods/major_list.py``, ``textpatch.py``, ``addfiles.py``)."""

from __future__ import annotations

import re
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet


def package_of(data: dict[str, Any]) -> str:
    """A patch's ``package`` (default sglang): a package name (checked against the matrix
    when the series loads, ``series.check_packages``)."""
    value = data.get("package", "sglang")
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", value):
        raise ValueError(f"package: {shown(value)} is not a package name (e.g. \"flashinfer\")")
    return value


def version_spec(spec: Any, where: str) -> str | None:
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{where}: expected a version specifier string (e.g. \">=0.5.6\")")
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"{where}: invalid version specifier {spec[:60]!r}") from None
    return spec


def shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a table" if isinstance(value, dict) else "an array"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def str_list(value: Any, where: str) -> tuple[str, ...]:
    """A non-empty array of non-empty strings (a lone string counts as one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of strings, got {shown(value)}")
    if not value:
        raise ValueError(f"{where}: empty array; give at least one, or leave the key out")
    if not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: expected non-empty strings")
    return tuple(value)


def one_str(value: Any, where: str, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {shown(value)}")
    if not empty and not value.strip():
        raise ValueError(f"{where}: empty string")
    return value


def opt_str(value: Any, where: str) -> str | None:
    return None if value is None else one_str(value, where, empty=False)


def one_bool(value: Any, where: str, default: bool) -> bool:
    """true/false only: "false", 0 or [] are refused, never read as a truth value."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {shown(value)}")
    return value


def table_list(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{where}: expected an array of tables ([[{where}]]), got {shown(value)}")
    return value


def no_unknown_keys(table: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(str(k) for k in set(table) - known)
    if extra:
        key = extra[0] if len(extra[0]) <= 60 else extra[0][:57] + "..."
        err = ValueError(f"{where}{'.' if where else ''}{key}: unknown key")
        err.key = f"{where}{'.' if where else ''}{extra[0]}"  # type: ignore[attr-defined] - the full key, for its line
        raise err
