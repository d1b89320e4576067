"""``codemod = "text"``: an anchored edit of a file that is not Python (``.cu``, ``.cuh``,
``.h``, ``.json``, ``.toml``, shell scripts).

A site names a file, an anchor (``anchor``: a literal, or ``anchor_regex``) that picks the
line, optional ``near`` literals that must appear within ``within`` lines of it, how many
lines must match (``count``, default 1) and the edit: ``old`` (in the anchored line;
default the literal anchor) becomes ``new``. Every byte outside ``old`` stays as it was.

Statuses: ``applied`` (``count`` anchored lines held ``old``), ``already-applied`` /
``absorbed-upstream`` (``new`` is already there, ``count`` times, at lines the ``near``
literals agree with), ``drift`` otherwise: the anchor matched another number of times, or
is gone, with the file's lines closest to it (difflib) as candidates (or, for a missing
file, the package's files closest to its name). The edited file is re-read: the anchor
must no longer hold ``old`` and ``new`` must be there ``count`` times; a ``.json`` or
``.toml`` file that parsed before must still parse.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from forgepatch.patching.filesite import close_paths, site_result
from forgepatch.patching.model import Location, SiteResult, Status
from forgepatch.patching.patchkeys import one_str, shown, str_list

SUFFIXES = (".cu", ".cuh", ".h", ".hh", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".inc", ".json", ".toml",
            ".sh", ".bash", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".cmake")


@dataclass(frozen=True)
class TextSite:
    file: str
    old: str
    new: str
    anchor: str | None = None  # a literal
    anchor_regex: str | None = None
    near: tuple[str, ...] = ()
    within: int = 3
    count: int = 1

    def anchored(self, line: str) -> bool:
        return (self.anchor in line) if self.anchor is not None else re.search(self.anchor_regex, line) is not None

    @property
    def anchor_text(self) -> str:
        return self.anchor if self.anchor is not None else self.anchor_regex


class TextPatch:
    file_patch = True
    KIND = "text"
    covers_gates = False
    KEYS = {"file", "anchor", "anchor_regex", "near", "within", "count", "old", "new"}

    @staticmethod
    def parse_site(table: dict[str, Any], where: str, path) -> TextSite:
        if "file" not in table or "new" not in table:
            raise ValueError(f"{where}: needs 'file' and 'new' (and an anchor)")
        rel = _rel_path(one_str(table["file"], f"{where}.file", empty=False), f"{where}.file")
        if rel.endswith(".py"):
            raise ValueError(f"{where}.file: {rel} is Python: patch it with a codemod (arch-gate, major-list)")
        if not rel.endswith(SUFFIXES) and "." in rel.rsplit("/", 1)[-1]:
            raise ValueError(f"{where}.file: {rel}: text patches edit {', '.join(sorted(set(SUFFIXES)))} files")
        if ("anchor" in table) == ("anchor_regex" in table):
            raise ValueError(f"{where}: needs exactly one of 'anchor' (a literal) or 'anchor_regex'")
        anchor = one_str(table["anchor"], f"{where}.anchor", empty=False) if "anchor" in table else None
        regex = one_str(table["anchor_regex"], f"{where}.anchor_regex", empty=False) if "anchor_regex" in table else None
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ValueError(f"{where}.anchor_regex: not a regular expression: {exc}") from None
        if "\n" in (anchor or ""):
            raise ValueError(f"{where}.anchor: one line (use 'near' for the lines around it)")
        old = table.get("old", anchor)
        if old is None:
            raise ValueError(f"{where}.old: needed with anchor_regex (the text of the line to replace)")
        old = one_str(old, f"{where}.old", empty=False)
        if "\n" in old:
            raise ValueError(f"{where}.old: one line's text (the edit starts in the anchored line)")
        new = one_str(table["new"], f"{where}.new", empty=False)
        if new == old:
            raise ValueError(f"{where}.new: the same as old (the edit changes nothing)")
        near = str_list(table["near"], f"{where}.near") if "near" in table else ()
        within, count = table.get("within", 3), table.get("count", 1)
        for key, value, low in (("within", within, 0), ("count", count, 1)):
            if type(value) is not int or not low <= value <= 10_000:
                raise ValueError(f"{where}.{key}: expected an integer >= {low}, got {shown(value)}")
        return TextSite(rel, old, new, anchor, regex, near, within, count)

    @staticmethod
    def run_site(run, name: str, spec: TextSite) -> SiteResult:
        text = run.read(spec.file)
        if text is None:
            return SiteResult(name, Status.DRIFT, detail=f"{spec.file}: no such file in the package",
                              candidates=close_paths(spec.file, run.paths()))
        todo, done = scan(text, spec)
        if len(todo) == spec.count and not done:
            new_text = edit(text, todo, spec)
            problem = check(text, new_text, spec)
            status = Status.INCOMPLETE if problem else Status.APPLIED
            locations = [Location(status, spec.file, no, None, problem or f"`{spec.old}` -> `{_one_line(spec.new)}`")
                         for no, _ in todo]
            if not problem:
                run.write(spec.file, new_text)
            return site_result(name, locations)
        if not todo and len(done) == spec.count:
            status = run.settled(spec.file)
            return site_result(name, [Location(status, spec.file, no, None, f"`{_one_line(spec.new)}` is there")
                                      for no in done])
        if todo or done:
            lines = [no for no, _ in todo] + done
            detail = (f"anchor `{spec.anchor_text}` matched {len(todo)} unpatched and {len(done)} patched line(s) "
                      f"({', '.join(map(str, sorted(lines)))}); the patch expects {spec.count}")
            return site_result(name, [Location(Status.DRIFT, spec.file, no, None, detail) for no in sorted(lines)])
        return SiteResult(name, Status.DRIFT, file=spec.file,
                          detail=f"{spec.file}: anchor `{spec.anchor_text}` not found"
                                 + (f" near {', '.join(spec.near)}" if spec.near else ""),
                          candidates=closest_lines(text, spec))


def _rel_path(text: str, where: str) -> str:
    parts = text.split("/")
    if text.startswith("/") or "\\" in text or "\0" in text or any(p in ("", ".", "..") for p in parts) or len(text) > 400:
        raise ValueError(f"{where}: {text[:60]!r} must be a package-relative path (no '..', no leading '/')")
    return text


def _one_line(text: str) -> str:
    return text if "\n" not in text else text.split("\n", 1)[0] + " ..."


def _near_ok(lines: list[str], i: int, spec: TextSite) -> bool:
    window = "".join(lines[max(0, i - spec.within): i + spec.within + 1])
    return all(n in window for n in spec.near)


def scan(text: str, spec: TextSite) -> tuple[list[tuple[int, int]], list[int]]:
    """(line number, offset of ``old``) of every anchored line still to edit, and the line
    numbers where ``new`` already stands (anchored, or found by its first line)."""
    lines = text.splitlines(keepends=True)
    todo, done, start = [], [], 0
    first_new = spec.new.split("\n", 1)[0]
    for i, line in enumerate(lines):
        at = start
        start += len(line)
        if not _near_ok(lines, i, spec):
            continue
        pos = line.find(spec.old) if spec.anchored(line) else -1
        if pos >= 0 and not text.startswith(spec.new, at + pos) and not _inside_new(text, at + pos, spec):
            todo.append((i + 1, at + pos))
            continue
        hit = text.find(spec.new, at) if first_new and first_new in line else -1
        if hit == -1 or hit >= at + len(line):
            continue
        # the anchored line, read back with `new` as `old`: the edit stands where the anchor was
        tail = text[hit + len(spec.new):].split("\n", 1)[0]
        if spec.anchored(text[at:hit] + spec.old + tail) or spec.near:
            done.append(i + 1)
    return todo, done


def _inside_new(text: str, pos: int, spec: TextSite) -> bool:
    """``old`` at ``pos`` is part of a ``new`` already written there (new contains old)."""
    k = spec.new.find(spec.old)
    while k != -1:
        if pos - k >= 0 and text.startswith(spec.new, pos - k):
            return True
        k = spec.new.find(spec.old, k + 1)
    return False


def edit(text: str, todo: list[tuple[int, int]], spec: TextSite) -> str:
    for _, at in sorted(todo, key=lambda t: -t[1]):
        text = text[:at] + spec.new + text[at + len(spec.old):]
    return text


def check(old_text: str, new_text: str, spec: TextSite) -> str | None:
    """The self-check: nothing left to edit, ``new`` there ``count`` times, structured
    files still parse."""
    todo, done = scan(new_text, spec)
    if todo or len(done) != spec.count:
        return (f"self-check: after the edit {len(todo)} line(s) still hold `{spec.old}` and `{_one_line(spec.new)}` "
                f"is found {len(done)} time(s), not {spec.count}")
    parse = _parser(spec.file)
    if parse is not None:
        try:
            parse(old_text)
        except Exception:  # noqa: BLE001 - the upstream file did not parse: nothing to keep
            return None
        try:
            parse(new_text)
        except Exception as exc:  # noqa: BLE001
            return f"self-check: the edited {spec.file} no longer parses: {str(exc)[:120]}"
    return None


def _parser(rel: str):
    if rel.endswith(".json"):
        import json

        return json.loads
    if rel.endswith(".toml"):
        import tomllib

        return tomllib.loads
    return None


def closest_lines(text: str, spec: TextSite, n: int = 3) -> list[str]:
    """The file's lines closest to the anchor (or ``old``), as ``file:line: text``."""
    lines = [ln.strip() for ln in text.splitlines()]
    want = spec.anchor if spec.anchor is not None else spec.old
    index: dict[str, int] = {}
    for no, ln in enumerate(lines, 1):
        if ln:
            index.setdefault(ln, no)
    matcher_pool = list(index)
    # long lines: compare the anchor with the line's start of the same length
    heads = {ln[: max(len(want) * 2, 40)]: ln for ln in matcher_pool}
    close = difflib.get_close_matches(want, list(heads), n=n, cutoff=0.4)
    return [f"{spec.file}:{index[heads[c]]}: {heads[c][:160]}" for c in close]
