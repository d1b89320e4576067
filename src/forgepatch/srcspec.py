"""Validation of pin sources and names: the one place that says what a PyPI version, a git
revision, a git repository and a pin name may look like.

``pypi:`` needs a PEP 440 version; ``git:`` needs a path or URL and a revision. Nothing
here runs anything: a value with shell metacharacters, control characters or absurd length
is refused before it can reach a subprocess, a cache path or a git ref. Every check raises
``ValueError("<what>: <problem>")``; callers add the file:line or the flag.
"""

from __future__ import annotations

import re

MAX_VERSION = 64
MAX_REV = 256
MAX_REPO = 1024
MAX_NAME = 128

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# the name rule in words: ``pin add --help`` and every error say the same thing
NAME_RULE = "a letter or digit, then letters, digits, '.', '_' or '-'; e.g. v0.5.23, nightly-1129"
# a git revision: a SHA, a branch or tag name, HEAD~3, v1^{commit}-free spellings
_REV = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./~^+-]*")
_SHELL = set(";|&$`<>(){}[]*?!'\"\\#") | {" ", "\t"}
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]*://[^\s]+|[A-Za-z0-9._-]+@[A-Za-z0-9._-]+:[^\s]+)")


def _plain(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what}: empty")
    if len(value) > limit:
        raise ValueError(f"{what}: {len(value)} characters (at most {limit})")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what}: contains a control character")
    return value


def check_text(value: object, what: str = "value", limit: int = MAX_VERSION) -> str:
    """A short one-line string (no control characters)."""
    return _plain(value, what, limit)


def _short(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def check_version(value: object, what: str = "pypi") -> str:
    """A PEP 440 version (``0.5.23``, ``0.5.21rc1``, ``0.5.3.post1``)."""
    from packaging.version import InvalidVersion, Version

    text = _plain(value, what, MAX_VERSION)
    try:
        Version(text)
    except InvalidVersion:
        raise ValueError(f"{what}: {_short(text)} is not a PEP 440 version (e.g. 0.5.23)") from None
    if text != text.strip():
        raise ValueError(f"{what}: {_short(text)} has surrounding spaces")
    return text


def check_rev(value: object, what: str = "rev") -> str:
    """A git revision: a SHA, a branch or tag name, ``HEAD~2``; no ranges, no shell syntax."""
    text = _plain(value, what, MAX_REV)
    if not _REV.fullmatch(text) or ".." in text or text.endswith((".lock", "/", ".")):
        raise ValueError(f"{what}: {_short(text)} is not a git revision (a SHA, branch or tag name)")
    return text


def check_repo(value: object, what: str = "repo") -> str:
    """A local path or a git URL (``https://...``, ``ssh://...``, ``git@host:path``)."""
    text = _plain(value, what, MAX_REPO)
    bad = sorted({c for c in text if c in _SHELL} - ({"~"}))
    if bad:
        raise ValueError(f"{what}: {_short(text)} contains {''.join(bad)!r} (a path or URL, no shell syntax)")
    if text.startswith("-"):
        raise ValueError(f"{what}: {_short(text)} starts with '-' (would read as an option)")
    if "://" in text and not _URL.fullmatch(text):
        raise ValueError(f"{what}: {_short(text)} is not a URL")
    return text


def check_name(value: object, what: str = "name") -> str:
    """A pin or profile name (NAME_RULE)."""
    text = _plain(value, what, MAX_NAME)
    if not _NAME.fullmatch(text) or text.endswith((".lock", ".")):
        raise ValueError(f"{what}: {_short(text)} ({NAME_RULE})")
    return text


def parse_source(src: str, what: str = "--source") -> tuple[str, str, str | None]:
    """``pypi:VERSION`` -> ("pypi", version, None); ``git:WHERE@REV`` -> ("git", where, rev);
    anything else -> ("dir", path, None). ValueError names ``what``."""
    if not isinstance(src, str) or not src:
        raise ValueError(f"{what}: empty source")
    if "\0" in src:
        raise ValueError(f"{what}: contains a NUL byte")
    if src.startswith("pypi:"):
        return "pypi", check_version(src[5:], f"{what} pypi:"), None
    if src.startswith("git:"):
        where, sep, rev = src[4:].rpartition("@")
        if not sep or not where or not rev:
            raise ValueError(f"{what}: git source {_short(src)} must be git:PATH_OR_URL@REV")
        return "git", check_repo(where, f"{what} git: path"), check_rev(rev, f"{what} git: revision")
    if len(src) > 4096:
        raise ValueError(f"{what}: path of {len(src)} characters")
    return "dir", src, None
