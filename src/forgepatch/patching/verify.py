"""The series checks itself before anything is written.

1. Every changed file re-parses and compiles (``compiles``).
2. Gate coverage (``lint``'s logic, on the result in memory): a gate of a patch's feature
   that still rejects the arch makes the patch ``incomplete`` (exit 1, nothing written),
   unless the patch declares it an intentional exception (``ignore``, with a reason):
   then it is reported as ``ignored``. Each patch must be complete on its own.
3. Only reported edits happen, and every reported edit happens: per function in the engine
   (changed if and only if an edit was reported), per file here (the files a patch changed
   are exactly the files of its reported edits).

All three land in the patch's result as the ``self-check`` pseudo-site, so every stage that
runs a series (apply, --check, lint, fork, drift, build, release) sees them.

Lines are upstream lines (the tree as given): on ``apply`` the check reads the patched text
and maps its lines back; a status scan (``drift``, no texts produced) reads the given text
and takes away the gates the codemod reported widening there.
"""

from __future__ import annotations

from collections import Counter

from forgepatch.arch import Arch
from forgepatch.errors import BadInput
from forgepatch.patching import evaluation, linediff, lint
from forgepatch.patching.codemods.base import Finding
from forgepatch.patching.model import (
    INCOMPLETE_HINT, SELF_CHECK_SITE, ApplyResult, Location, SiteResult, Status,
)
from forgepatch.patching.patchset import Patch


def compiles(text: str, where: str, patch_id: str) -> None:
    """A changed file must re-parse and compile, or the patch is broken (never written)."""
    try:
        compile(text, where, "exec", dont_inherit=True)
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"{where}: patch {patch_id} produced invalid Python: {exc}") from None


def _line_map(old: str, new: str):
    """new line number -> old line number (lines the edit did not touch map exactly)."""
    ops = linediff.opcodes(old.splitlines(), new.splitlines(), autojunk=True)

    def back(line: int) -> int:
        j = line - 1
        for _tag, i1, i2, j1, j2 in ops:
            if j1 <= j < j2:
                return i1 + min(j - j1, max(i2 - i1 - 1, 0)) + 1
        return line

    return back


def file_gaps(text: str, new_text: str, rel: str, findings: list[Finding], markers: list[str],
              arch: Arch) -> list[lint.LintFinding]:
    """Gates of the feature in this file that still reject the arch after the patch."""
    target = arch.gate_family
    if new_text != text:  # apply: read the result itself
        if not lint.candidate(new_text.encode("utf-8"), markers):
            return []
        try:
            found = lint.lint_file(new_text, rel, markers, target, arch.name)
        except SyntaxError as exc:
            return [_unreadable(rel, exc)]
        if not found:
            return []
        back = _line_map(text, new_text)
        return [lint.LintFinding(g.file, back(g.line), g.function, g.gate, g.reason) for g in found]
    try:
        found = lint.lint_file(text, rel, markers, target, arch.name)
    except SyntaxError as exc:
        return [_unreadable(rel, exc)]
    # a status scan produced no text: the gates it reported widening are the difference
    widened = Counter(f.line for f in findings if f.status is Status.APPLIED and f.line is not None)
    out = []
    for g in found:
        if widened[g.line] > 0:
            widened[g.line] -= 1
            continue
        out.append(g)
    return out


def _unreadable(rel: str, exc: SyntaxError) -> lint.LintFinding:
    return lint.LintFinding(rel, exc.lineno, "<module>", "",
                            f"cannot be checked: this Python cannot parse the file ({exc.msg})")


def attach_coverage(result: ApplyResult, gaps: list[tuple[Patch, list[lint.LintFinding]]]) -> None:
    """Put each patch's gaps in its result: ``incomplete``, or ``ignored`` with the
    patch's reason. A gate two patches' features share is reported once, by the first."""
    seen: set[tuple[str, int | None, str]] = set()
    for (patch, found), pres in zip(gaps, result.patches):
        locations = []
        for g in sorted(found, key=lambda g: (g.file, g.line or 0)):
            key = (g.file, g.line, g.gate)
            if key in seen:
                continue
            seen.add(key)
            rule = next((r for r in patch.ignore if r.matches(g.file, g.function, g.gate)), None)
            if rule is not None:
                locations.append(Location(Status.IGNORED, g.file, g.line, g.function,
                                          f"{g.reason}; ignored: {rule.reason}", g.gate or None))
            else:
                locations.append(Location(Status.INCOMPLETE, g.file, g.line, g.function,
                                          f"{g.reason}; {INCOMPLETE_HINT}", g.gate or None))
        _add(pres, locations)


def changed_is_reported(result: ApplyResult, emitted: bool) -> None:
    """The files each patch changed are exactly the files of the edits it reported."""
    if not emitted:
        return  # a status scan produces no text: the engine held each function to its report
    state = dict(result.originals)
    for pres in result.patches:
        changed = {rel for rel, text in pres.changes.items() if state.get(rel) != text}
        state.update(pres.changes)
        reported = pres.edited_files
        locations = [Location(Status.INCOMPLETE, rel, None, "<module>", "self-check: changed but no edit reported")
                     for rel in sorted(changed - reported)]
        locations += [Location(Status.INCOMPLETE, rel, None, "<module>", "self-check: an edit was reported but the file is unchanged")
                      for rel in sorted(reported - changed)]
        _add(pres, locations)


def _add(pres, locations: list[Location]) -> None:
    if not locations:
        return
    site = next((s for s in pres.sites if s.site == SELF_CHECK_SITE), None)
    if site is None:
        site = SiteResult(SELF_CHECK_SITE, Status.NOT_APPLICABLE)
        pres.sites.append(site)
    site.locations += locations
    site.status = Status.worst([loc.status for loc in site.locations])
    first = next(loc for loc in site.locations if loc.status is site.status)
    site.file, site.line, site.symbol = first.file, first.line, first.symbol
    n = sum(loc.status is site.status for loc in site.locations)
    site.detail = str(first) if n == 1 else f"{n} finding(s) {site.status.value}; first: {first}"
    pres.status = Status.worst([s.status for s in pres.sites])


def carry_evaluation(scan, full) -> None:
    """Give a status-only scan (``scan``: drift, no texts, so no evaluation) the findings the
    same series' run with texts (``full``) made: a scan says what ``apply`` says, never
    "applies" where apply says unverified, wrong or incomplete."""
    by_id = {p.patch_id: p for p in full.patches}
    for pres in scan.patches:
        other = by_id.get(pres.patch_id)
        if other is None:
            continue
        pres.checks, pres.scope = other.checks, other.scope
        have = {(loc.status, loc.file, loc.line, loc.detail) for s in pres.sites for loc in s.locations}
        site = next((s for s in other.sites if s.site == SELF_CHECK_SITE), None)
        if site is not None:
            _add(pres, [loc for loc in site.locations if (loc.status, loc.file, loc.line, loc.detail) not in have])
        # a site the run with texts failed for another cause than the evaluation (a module
        # edit only a run with texts makes, e.g. finalize_module changing the file unreported):
        # the scan's site says so too, with the same locations
        mine = {s.site: s for s in pres.sites}
        for osite in other.sites:
            target = mine.get(osite.site)
            if osite.site == SELF_CHECK_SITE or target is None or not osite.status.failed:
                continue
            seen = {(loc.status, loc.file, loc.line, loc.detail) for loc in target.locations}
            target.locations += [loc for loc in osite.locations if loc.status.failed
                                 and (loc.status, loc.file, loc.line, loc.detail) not in seen]
            if not target.status.failed:
                target.detail = osite.detail
            target.status = Status.worst([target.status, osite.status])
        if other.status.failed and not pres.status.failed:
            # the run with texts failed where the scan did not (whatever the cause): the worse holds
            pres.status = other.status
        pres.status = Status.worst([pres.status] + [s.status for s in pres.sites])


def evaluate(patch: Patch, pres, before: dict[str, str], overlay, arch: Arch, paths: list[str]):
    """The per-arch evaluation of one patch's step (:mod:`evaluation`): the files it changed
    and the tree's files of its feature, before and after it."""
    import re

    def text_before(rel: str) -> str | None:
        if rel in before:  # an earlier patch of the series changed it
            return before[rel]
        if rel in overlay.sources:
            return overlay.sources[rel].text
        return overlay.read_text(rel) if rel not in overlay.texts else None

    changed = {rel for rel, text in pres.changes.items() if text_before(rel) != text}
    found = overlay.found.get(patch.id, {})
    sites: dict[str, set[str]] = {}
    for entries in found.values():
        for entry in entries:
            m = re.match(r"(\S+) \((.+):\d+\)", entry)
            if m and "[no marker in code]" not in entry:  # a namesake is not a site
                sites.setdefault(m.group(2), set()).add(m.group(1).rsplit(".", 1)[-1])
    absorbed = {(loc.file, (loc.symbol or "").rsplit(".", 1)[-1]) for s in pres.sites for loc in s.locations
                if loc.status is Status.ABSORBED and loc.file}
    absorbed |= {(s.file, (s.symbol or "").rsplit(".", 1)[-1]) for s in pres.sites if s.status is Status.ABSORBED and s.file}
    examined = set(changed) | set(sites) | {f for f, _ in absorbed}
    examined |= set(overlay.feature_files.get(patch.id, ()))
    olds, news = {}, {}
    for rel in sorted(examined):
        old = text_before(rel)
        new = overlay.read_text(rel) if rel in changed else old
        if old is None or new is None:
            continue
        olds[rel], news[rel] = old, new
    maps = {rel: _line_map(olds[rel], news[rel]) for rel in changed if rel in olds}

    def line_back(rel: str, line: int) -> int:
        return maps[rel](line) if rel in maps else line

    def read_bytes(rel: str):
        try:
            return overlay.read_bytes(rel)
        except (KeyError, OSError):
            return None

    library = evaluation.library_loader(read_bytes, set(paths), overlay.library_files)
    markers = sorted({m for s in patch.sites for m in s.markers})
    return evaluation.verify_patch(olds, news, library, markers, sites, arch, list(patch.arches),
                                   widening=patch.covers_gates, absorbed=absorbed, line_back=line_back,
                                   changed=changed, within={fn: site.within for site in patch.sites if site.within
                                                            for fn in site.functions}, trees=overlay.ast_trees,
                                   memo=overlay.evaluations)


_CHECK_STATUS = {"unverified": Status.UNVERIFIED, "wrong": Status.WRONG, "incomplete": Status.INCOMPLETE}


def attach_evaluation(patch: Patch, pres, checks) -> None:
    """Put the evaluation's findings in the patch's result (``unverified``, ``wrong``,
    ``incomplete``, or ``ignored`` by the patch's rules); a gate the coverage check already
    reported incomplete at the same place is reported once."""
    pres.checks = sorted(checks, key=lambda c: (c.file, c.line))
    import re

    known = [loc for s in pres.sites for loc in s.locations
             if loc.status in (Status.INCOMPLETE, Status.IGNORED, Status.DRIFT)]

    def reported(c) -> bool:
        """The coverage check already names this gate (its line, its code, or the module
        constant it reads)."""
        words = set(re.findall(r"\w+", c.expr))
        norm = " ".join(c.expr.split())
        for loc in known:
            if loc.file != c.file:
                continue
            if loc.line == c.line or (loc.gate and " ".join(loc.gate.split()) in norm
                                      and (loc.symbol or "").rsplit(".", 1)[-1] == c.function.rsplit(".", 1)[-1]):
                return True
            if loc.symbol and loc.symbol in words:
                return True
        return False

    locations = []
    for c in pres.checks:
        status = _CHECK_STATUS.get(c.status)
        if status is None or (status is Status.INCOMPLETE and reported(c)):
            continue
        detail = c.reason
        if status is Status.UNVERIFIED and not c.edited:
            # a gate the patch leaves as upstream wrote it, which the evaluator cannot decide:
            # the patch may declare it not its own (`[[ignore]]`, with a reason); an edited
            # one stays unverified whatever the rules say
            rule = next((r for r in patch.ignore if r.matches(c.file, c.function, c.expr)), None)
            if rule is not None:
                status, detail = Status.IGNORED, f"{c.reason}; ignored: {rule.reason}"
        elif status is Status.INCOMPLETE:
            rule = next((r for r in patch.ignore if r.matches(c.file, c.function, c.expr)), None)
            scoped = next((site for site in patch.sites if site.within and c.outside_within
                           and c.function.rsplit(".", 1)[-1] in site.functions), None)
            if rule is not None:
                status, detail = Status.IGNORED, f"{c.reason}; ignored: {rule.reason}"
            elif scoped is not None:
                # the site names its branch (`within`): the function's other branches are
                # declared not this patch's, and shown as such
                status, detail = Status.IGNORED, (f"{c.reason}; ignored: outside site {scoped.name}'s within "
                                                  f"({', '.join(scoped.within)})")
            else:
                detail = f"{c.reason}; {INCOMPLETE_HINT}"
        locations.append(Location(status, c.file, c.line or None, c.function, detail, c.expr or None))
    _add(pres, locations)
