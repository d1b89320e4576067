"""Running a patch series over a tree: prefilter, parse candidates, edit, check the result.

Nothing here writes files: the result carries the new texts, and ``writer`` commits them
transactionally. Every changed file is re-parsed and compiled before it is returned, and
the series checks itself (``verify``): every edit is reported, only reported edits happen,
and no gate of a patch's feature still rejects the arch.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, MutableMapping

import libcst as cst

from forgepatch.arch import Arch
from forgepatch.errors import BadInput
from forgepatch.infra.gcpause import gc_paused
from forgepatch.patching import astview, evaluation, guard, lint, parselimits, sourcetext, splice, verify
from forgepatch.patching.codemods.base import FileContext, Finding
from forgepatch.patching.filepatch import run_file_patch
from forgepatch.patching.functions import all_functions, parse, replace_functions, scan_functions
from forgepatch.patching.locate import def_pattern, hinted, in_site_modules, is_candidate, ranked, reads_arch, rename_hint
from forgepatch.patching.model import ApplyResult, Location, PatchResult, SiteResult, Status, Tree
from forgepatch.patching.patchset import Patch, Site, patchset_hash


_WORD = re.compile(r"[A-Za-z0-9_]+")
_DEF_NAME = re.compile(rb"def (\w+)\(")


class _Overlay:
    """The tree as the series sees it: earlier patches' outputs over the original files."""

    def __init__(self, tree: Tree) -> None:
        self.tree, self.texts = tree, {}
        self.edited: dict[str, set[str]] = {}  # functions an earlier patch of the series rewrote
        self.sources: dict[str, sourcetext.SourceText] = {}  # how each original file decoded
        self._paths = set(tree.paths())
        self.feature_files: dict[str, list[str]] = {}  # patch id -> files naming a marker and an arch word
        self.scope_notes: dict[str, list[str]] = {}  # patch id -> what the evaluation left out, and why
        self.found: dict[str, dict[str, list[str]]] = {}  # patch id -> site -> functions found
        # a series of several patches reads each file once and parses each text once: the
        # bytes of the tree's files, and per file the libcst module of its current text
        # (the one a parse gave, or the one the last patch's edit produced: its code is that text)
        self.keep_bytes = False
        self._bytes: dict[str, bytes] = {}
        self.modules: dict[str, tuple[str, cst.Module]] = {}
        self.node_memo: dict[tuple, object] = {}  # FileContext.series_memo, and per module or text: its site functions
        # the same for the evaluation: ast trees of texts, parsed modules a file imports from
        self.ast_trees: dict[tuple[str, str], Any] = {}  # (rel, text) -> its stdlib ast (``ast_tree``)
        self.library_files: dict[str, tuple[bytes, Any]] = {}
        self.evaluations: dict[str, dict] = {}  # what a tree yields to any patch's evaluation (``verify_patch``)
        # and one byte index for the series' prefilters: the original files holding a needle
        # (or matching a pattern), every patch's needles found in one pass over the tree
        # (``prime``, ``holding``); a file an earlier patch edited is tested as it is now
        self._holding: dict[bytes | re.Pattern[bytes], frozenset[str]] = {}
        self._defining: dict[bytes, list[str]] | None = None  # NAME -> the files holding `def NAME(`

    def read_text(self, rel: str) -> str | None:
        if rel in self.texts:
            return self.texts[rel]
        if rel not in self._paths:
            return None
        if rel not in self.sources:
            self.sources[rel] = sourcetext.decode(self._bytes.get(rel) or self.tree.read(rel))
        return self.sources[rel].text

    def read_bytes(self, rel: str) -> bytes:
        if rel in self.texts:
            return self.texts[rel].encode(self.sources[rel].encoding, "replace") if rel in self.sources \
                else self.texts[rel].encode("utf-8")
        if not self.keep_bytes:
            return self.tree.read(rel)
        data = self._bytes.get(rel)
        if data is None:
            data = self._bytes[rel] = self.tree.read(rel)
        return data

    def holding(self, *needles: bytes | re.Pattern[bytes]) -> set[str]:
        """The files of the tree whose ORIGINAL bytes hold one of ``needles`` (a substring,
        or a pattern that ``search`` finds); each needle is tested once per series, those
        not yet known in one pass over the files (each file's bytes once, while cached).
        Needs ``keep_bytes``."""
        self.prime(needles)
        return set().union(*(self._holding[n] for n in needles))

    def prime(self, needles, defs: bool = False) -> None:
        """Search the tree for every needle not yet known (and, with ``defs``, index its
        ``def NAME(``s) in ONE pass over the files: a series asks for all of its patches'
        needles before the first patch runs, so each file's bytes are read into the cache
        once and tested for all of them there (one pass per needle streams the whole tree
        from memory each time: ~35 ms per needle on 0.5.23's 68 MB)."""
        fresh = [n for n in dict.fromkeys(needles) if n not in self._holding]
        defs = defs and self._defining is None
        if fresh or defs:
            prefetch = getattr(self.tree, "prefetch", None)
            if prefetch is not None:  # a git tree reads its blobs in one batch
                prefetch(self.tree.paths())
            # needles sharing a substring: the tree is searched for that substring once, and
            # each needle only in the files that hold it (a file holding a needle holds every
            # part of it, so the answer is the same)
            shared, alone = _shared_parts(fresh)
            self._search(alone + list(shared), self.tree.paths(), defs)
            for part, members in shared.items():
                self._search(members, sorted(self._holding[part]))

    def _search(self, needles: list[bytes | re.Pattern[bytes]], paths, defs: bool = False) -> None:
        found: list[list[str]] = [[] for _ in needles]
        tests = [(n.search, hit) if isinstance(n, re.Pattern) else (n, hit) for n, hit in zip(needles, found)]
        read = self._original_bytes
        defining: dict[bytes, list[str]] = {}
        for rel in paths:
            data = read(rel)
            for test, hit in tests:
                if test in data if isinstance(test, bytes) else test(data) is not None:
                    hit.append(rel)
            if defs:  # `def NAME(` matches never overlap: each is found
                for name in set(_DEF_NAME.findall(data)):
                    defining.setdefault(name, []).append(rel)
        self._holding.update((n, frozenset(hit)) for n, hit in zip(needles, found))
        if defs:
            self._defining = defining

    def defining(self, names: list[str]) -> set[str] | None:
        """The files whose ORIGINAL bytes hold ``def NAME(`` for one of ``names`` (what
        ``locate.def_pattern`` matches), from one pass over the tree per series; None for a
        name that is not plain ASCII word characters (the pattern is searched instead)."""
        if not all(_WORD.fullmatch(n) for n in names):
            return None
        self.prime((), defs=True)
        assert self._defining is not None
        return {rel for n in names for rel in self._defining.get(n.encode(), ())}

    def _original_bytes(self, rel: str) -> bytes:
        data = self._bytes.get(rel)
        if data is None:
            data = self._bytes[rel] = self.tree.read(rel)
        return data

    def module(self, rel: str, text: str) -> cst.Module:
        """The libcst module of ``text`` (the file's current text): parsed once per text."""
        held = self.modules.get(rel)
        if held is not None and held[0] == text:
            return held[1]
        module = parse(text, self.display(rel))
        self.modules[rel] = (text, module)
        return module

    def ast_tree(self, rel: str, text: str) -> Any:
        """The stdlib ``ast`` of ``text`` (a text of ``rel``), parsed once per series for the
        splice of an edit and the evaluation alike; None where this Python cannot parse it."""
        tree = self.ast_trees.get((rel, text))
        if tree is None:
            try:
                tree = self.ast_trees[(rel, text)] = ast.parse(text)
            except (SyntaxError, ValueError):
                return None
        return tree

    def check_writable(self, rel: str, new_text: str) -> None:
        """An edited file must be written back in its own encoding: a file that does not
        decode, or an edit its encoding cannot hold, stops the run (exit 2, file:line)."""
        src = self.sources.get(rel)
        if src is None:
            return
        if not src.decodes:
            raise BadInput(f"{self.display(rel)}:{src.bad_line}: {src.problem} (a patch must edit this file; "
                           f"it is left untouched)")
        line = src.first_unencodable_line(new_text)
        if line is not None:
            raise BadInput(f"{self.display(rel)}:{line}: the patched line cannot be written in the file's "
                           f"{src.encoding} encoding")

    def display(self, rel: str) -> str:
        return self.tree.display(rel) if hasattr(self.tree, "display") else rel


def edit_file(text: str, rel: str, patch: Patch, sites: list[Site], arch: Arch, overlay: _Overlay,
              pristine: bool, emit: bool = True) -> tuple[str, list[Finding], dict[str, list[str]]]:
    """Apply ``patch``'s codemod to one file. Returns (new text, findings, functions found
    per site). With ``emit`` False (a status scan) each function is parsed on its own and
    edited in memory; no module edits, codegen or compile. Either way each function is held
    to "changed if and only if an edit was reported"."""
    held = overlay.modules.get(rel)
    if not (emit and held is not None and held[0] == text):  # a held module: no parse follows
        parselimits.check(text, overlay.display(rel))  # before any libcst parse (a crash or minutes otherwise)
        if emit and _declarative(patch):
            # the file is not parsed yet: its site functions first, each on its own; a
            # patch that changes none of them (absorbed upstream, already applied) needs no
            # module, its findings are the scan's (the codemod reads the text, never the
            # module, inside a function); one that changes one is run on the parsed module
            scanned = edit_file(text, rel, patch, sites, arch, overlay, pristine, emit=False)
            if not any(f.status is Status.APPLIED for f in scanned[1]):
                return scanned
    wanted = {fn for s in sites for fn in s.functions}
    functions = None if emit else _scanned(overlay, text, wanted)
    if functions is None:
        module = overlay.module(rel, text)
        key = ("functions", module, frozenset(wanted))  # the same module: the same functions
        functions = overlay.node_memo.get(key) if overlay.keep_bytes else None
        if functions is None:
            functions = all_functions(module, text, wanted)
            if overlay.keep_bytes:
                overlay.node_memo[key] = functions
    else:
        module = functions[0][3] if functions else cst.Module(body=[])
    ctx = FileContext(arch, rel, module, pristine, overlay.read_text, {}, {}, emit=emit, text=text,
                      series_memo=overlay.node_memo if overlay.keep_bytes else None)
    codemod = guard.codemod_for(patch)  # a custom .py patch runs guarded
    # which site functions name their site's markers in code: stdlib ast (C speed) where it
    # can parse the file, else libcst
    naming = {site.name: astview.site_functions_naming(text, set(site.functions), site.markers)
              for site in sites if site.markers}
    found: dict[str, list[str]] = {}
    replacements: dict[cst.CSTNode, cst.CSTNode] = {}
    for node, qual, def_line, holder in functions:
        ctx.module = holder
        ctx.scope(node, def_line)
        current = node
        # a gate an earlier patch of this series widened is already-applied, not absorbed upstream
        ctx.pristine = pristine and qual not in overlay.edited.get(rel, ())
        for site in sites:
            if node.name.value not in site.functions:
                continue
            if not site.markers:
                named = True
            elif naming[site.name] is not None and def_line is not None:
                named = def_line in naming[site.name]
            else:
                named = ctx.names_any([node], site.markers)
            # only a function without its markers is asked (codegen of a big function costs)
            reads = " [reads the arch]" if not named and reads_arch(ctx.code(node)) else ""
            found.setdefault(site.name, []).append(f"{qual} ({rel}:{def_line})" + ("" if named else " [no marker in code]")
                                                   + reads)
            if not named:
                continue  # a marker in a comment or docstring does not make a site
            before = len(ctx.findings)
            edited = codemod.edit_function(current, site, qual, ctx) or current
            _hold_to_report(ctx, site, qual, current, edited, ctx.findings[before:])
            current = edited
        if current is not node:
            replacements[node] = current
            if emit:
                overlay.edited.setdefault(rel, set()).add(qual)
    if not emit:
        return text, ctx.findings, found
    ctx.module = module
    edited = replace_functions(module, replacements) if replacements else module
    out = codemod.finalize_module(edited, ctx)
    if out is not edited and not ctx.provided:
        ctx.findings.append(Finding(sites[0].name, Status.INCOMPLETE, None, "<module>",
                                    "self-check: finalize_module changed the file without saying what (ctx.provided)", rel))
    new_text = text if out is module else splice.module_code(module, text, out, overlay.ast_tree(rel, text))
    if new_text != text:
        overlay.modules[rel] = (new_text, out)  # the next patch of the series edits this module
        verify.compiles(new_text, overlay.display(rel), patch.id)
        edited_sites = [f.site for f in ctx.findings if f.status is Status.APPLIED]
        if not edited_sites:
            ctx.findings.append(Finding(sites[0].name, Status.INCOMPLETE, None, "<module>",
                                        "self-check: the codemod changed this file without reporting an edit", rel))
        for what in ctx.provided:
            ctx.findings.append(Finding(edited_sites[0] if edited_sites else sites[0].name, Status.APPLIED,
                                        None, "<module>", what, rel))
    elif ctx.provided:
        ctx.findings.append(Finding(sites[0].name, Status.INCOMPLETE, None, "<module>",
                                    "self-check: the codemod reported module additions that are not in the file", rel))
    return new_text, ctx.findings, found


READS_ARCH = " [reads the arch]"


def _scanned(overlay: _Overlay, text: str, wanted: set[str]):
    """``scan_functions``; in a series once per text and names, so a later patch reading the
    same functions gets the same nodes (and what the series read off them)."""
    if not overlay.keep_bytes:
        return scan_functions(text, wanted)
    key = ("scan", text, frozenset(wanted))
    if key not in overlay.node_memo:
        overlay.node_memo[key] = scan_functions(text, wanted)
    return overlay.node_memo[key]


def _declarative(patch: Patch) -> bool:
    """A patch of a shipped edit kind: its codemod reads a function's text and nodes only.
    A custom ``.py`` codemod may read the whole module in ``edit_function``."""
    return not guard.is_custom(patch)


def _in_modules(entry: str, site: Site) -> bool:
    m = re.search(r"\((.+):\d+\)", entry)
    return bool(m) and (not site.modules or hinted(m.group(1), site))
def _hold_to_report(ctx: FileContext, site: Site, qual: str, node, edited, findings: list[Finding]) -> None:
    """A function changes if and only if the codemod reported an edit in it."""
    reported = any(f.status is Status.APPLIED for f in findings)
    changed = edited is not node  # a codemod returns None (or the node) when it changes nothing
    if changed and not reported and ctx.code(edited) != ctx.code(node):
        ctx.report(site.name, Status.INCOMPLETE, node, qual, "self-check: the codemod changed this function without reporting it")
    elif reported and not changed:
        ctx.report(site.name, Status.INCOMPLETE, node, qual, "self-check: the codemod reported an edit the function does not have")


def _other_sites(patch: Patch, site: Site) -> frozenset[str]:
    """The function names the patch's other sites name (their gates are not this one renamed)."""
    return frozenset(fn for s in patch.sites if s.name != site.name for fn in s.functions) - set(site.functions)


def _site_result(site: Site, findings: list[Finding], found: list[str], overlay: _Overlay,
                 paths: list[str], others: frozenset[str] = frozenset()) -> SiteResult:
    mine = sorted((f for f in findings if f.site == site.name),
                  key=lambda f: (f.file or "", f.line is None, f.line or 0))
    if mine:
        status = Status.worst([f.status for f in mine])
        first = next(f for f in mine if f.status is status and f.line is not None) if any(
            f.status is status and f.line is not None for f in mine) else next(f for f in mine if f.status is status)
        locations = [Location(f.status, f.file, f.line, f.symbol, f.detail) for f in mine]
        return SiteResult(site.name, status, first.file, first.line, first.symbol,
                          "; ".join(dict.fromkeys(f.detail for f in mine if f.status is status)), locations=locations)
    # optional means absent from the tree, never present but unreadable: a site function
    # that reads the arch but no longer names its markers (renamed) is drift; one whose
    # gate the codemod does not read is judged by the evaluation (``evaluation``)
    renamed = [f[: -len(READS_ARCH)] for f in found if f.endswith(READS_ARCH) and "[no marker in code]" in f
               and _in_modules(f, site)]  # a namesake elsewhere (``anywhere``) is not the site renamed
    if renamed:
        m = re.search(r"\((.+):(\d+)\) \[", renamed[0])
        file, line = (m.group(1), int(m.group(2))) if m else (None, None)
        sym = renamed[0].split(" (", 1)[0]
        detail = (f"site function found and it reads the arch, but its markers ({', '.join(site.markers)}) "
                  f"are not in its code (renamed?): {', '.join(renamed)}")
        return SiteResult(site.name, Status.DRIFT, file, line, sym, detail,
                          locations=[Location(Status.DRIFT, file, line, sym, detail)])
    if not site.required:
        detail = (f"optional site: no gate to widen in {', '.join(found)}" if found else "optional site absent")
        return SiteResult(site.name, Status.NOT_APPLICABLE, detail=detail)
    where = f" in {', '.join(site.modules)}" if site.modules and not site.anywhere else ""
    markers = ", ".join(site.markers) or "(none)"
    detail = (f"function(s) found but no gate to widen naming {markers}: {', '.join(found)}"
              if found else f"no function named {' / '.join(site.functions)}{where} with markers {markers}")
    ordered = [p for p in paths if hinted(p, site)] + [p for p in paths if not hinted(p, site)]
    # by meaning first (``locate.Candidate.key``): the site may have been renamed, or moved
    # out of its modules, so files outside them that name a marker are ranked too
    best = ranked(ordered, overlay.read_bytes, site, others=others)
    if best and best[0].looks_renamed and best[0].name not in site.functions and not best[0].other_site:
        detail += f"; {rename_hint(site, best[0])}"
    return SiteResult(site.name, Status.DRIFT, detail=detail, candidates=[c.render() for c in best])


def run_patches(tree: Tree, patches: list[Patch], arch: Arch, version: str | None,
                cache: MutableMapping[str, Any] | None = None, pristine: bool | None = None,
                self_check: bool = True, evaluate: bool = True) -> ApplyResult:
    """Apply ``patches`` in order to ``tree`` for ``arch``; nothing is written.

    With ``cache`` (a persistent mapping, used by drift scans over git blobs) only statuses
    are computed: per-file findings are memoised by (blob key, patch, arch, live sites) and no
    new text is produced (``changes`` stays empty). ``self_check`` False skips the gate
    coverage check (the benchmark's baseline; nothing else should turn it off).

    The per-arch evaluation (``evaluation``: every gate of the feature under every arch,
    before and after) runs when texts are produced (not on a memoised status scan);
    ``evaluate`` False skips it (the benchmark's baseline, and the tests that compare a
    status scan with the engine).
    """
    with gc_paused():
        return _run_patches(tree, patches, arch, version, cache, pristine, self_check, evaluate)


def _run_patches(tree: Tree, patches: list[Patch], arch: Arch, version: str | None,
                 cache: MutableMapping[str, Any] | None, pristine: bool | None, self_check: bool,
                 evaluate: bool) -> ApplyResult:
    pristine = getattr(tree, "pristine", False) if pristine is None else pristine
    overlay = _Overlay(tree)
    paths = tree.paths()
    result = ApplyResult(arch=arch.name, version=version, patchset_hash=patchset_hash(patches))
    # more than one patch reads the tree: keep its bytes for the next one
    overlay.keep_bytes = sum(arch.name in p.arches and p.applies(version) for p in patches) > 1
    if overlay.keep_bytes and cache is None:
        _prime(overlay, patches, arch, version, self_check)
    gaps: list[tuple[Patch, list[lint.LintFinding]]] = []
    evaluated = []
    for patch in patches:
        before = dict(overlay.texts)
        pres, pgaps = _run_patch(patch, arch, version, overlay, paths, cache, pristine, result, self_check)
        result.patches.append(pres)
        gaps.append((patch, pgaps))
        if self_check and evaluate and cache is None and arch.name in patch.arches and patch.applies(version):
            evaluated.append((patch, pres, before))
    if self_check:
        verify.attach_coverage(result, gaps)
        for patch, pres, before in evaluated:
            verify.attach_evaluation(patch, pres, verify.evaluate(patch, pres, before, overlay, arch, paths))
            pres.scope = list(overlay.scope_notes.get(patch.id, ()))
        verify.changed_is_reported(result, emitted=cache is None)
        result.verified = True
    return result


def _feature_needles(patch: Patch) -> tuple[list[str], list[bytes]]:
    """The markers whose files make up a patch's feature (``evaluation.feature_file``), and
    their bytes; with the self-check on, the same markers pick the gate-coverage files."""
    markers = sorted({m for s in patch.sites for m in s.markers}) if patch.covers_gates else []
    return markers, [m.encode() for m in markers]


def _prime(overlay: _Overlay, patches: list[Patch], arch: Arch, version: str | None, self_check: bool) -> None:
    """Everything the series' prefilters (``_maybe``) will ask of the tree, in one pass."""
    needles: list[bytes] = []
    defs = False
    for patch in patches:
        if arch.name not in patch.arches or not patch.applies(version) or getattr(patch.codemod, "file_patch", False):
            continue
        feature = _feature_needles(patch)[1]
        needles += feature + ([b"is_sm"] if self_check and feature else [])
        defs = defs or any(patch.site_applies(s, version) for s in patch.sites)
    overlay.prime(needles, defs)


def _not_applicable(patch: Patch, detail: str) -> PatchResult:
    return PatchResult(patch.id, patch.summary, Status.NOT_APPLICABLE,
                       [SiteResult(s.name, Status.NOT_APPLICABLE, detail=detail) for s in patch.sites])


def _run_patch(patch: Patch, arch: Arch, version: str | None, overlay: _Overlay, paths: list[str],
               cache: MutableMapping[str, Any] | None, pristine: bool, result: ApplyResult,
               self_check: bool) -> tuple[PatchResult, list[lint.LintFinding]]:
    if arch.name not in patch.arches:
        return _not_applicable(patch, f"patch is not for {arch.name}"), []
    if not patch.applies(version):
        why = f": {patch.applies_to_reason}" if patch.applies_to_reason else ""
        return _not_applicable(patch, f"version {version} not in {patch.applies_to}{why}"), []
    live = [s for s in patch.sites if patch.site_applies(s, version)]
    if getattr(patch.codemod, "file_patch", False):  # major-list, text, add-files (``filepatch``)
        return run_file_patch(patch, arch, version, overlay, pristine, result, live), []
    skipped = {s.name: SiteResult(s.name, Status.NOT_APPLICABLE, detail=f"version {version} not in {s.applies_to}"
                                  + (f": {s.applies_to_reason}" if s.applies_to_reason else ""))
               for s in patch.sites if s not in live}
    feature_markers, feature_needles = _feature_needles(patch)
    markers, needles = (feature_markers, feature_needles) if self_check else ([], [])
    findings: list[Finding] = []
    found: dict[str, list[str]] = {}
    changes: dict[str, str] = {}
    gaps: list[lint.LintFinding] = []
    files: dict[str, list[Site]] = {}
    quick = def_pattern(live) if live else None
    # a file's findings depend on its blob, the patch, the arch, pristineness, which sites
    # apply at this version (a blob unchanged across an applies_to boundary is rescanned)
    # and whether its gates are checked
    scope = f"{patch.hash}:{arch.name}:{int(pristine)}:{','.join(s.name for s in live)}:{int(bool(markers))}"
    todo, pending, dups = [], set(), []
    overlay.feature_files[patch.id] = feature = []
    feature_hits: list[tuple[str, list[str]]] = []
    maybe = _maybe(overlay, feature_needles, live, quick, needles if markers else None) \
        if overlay.keep_bytes and cache is None else None
    for rel in (paths if maybe is None else [rel for rel in paths if rel in maybe]):
        key = None if rel in overlay.texts or cache is None else overlay.tree.key(rel)
        ckey = f"{key}:{scope}" if key else None
        if ckey in pending:
            dups.append((rel, ckey))  # same blob at another path: answered once it is scanned
        elif ckey and ckey in cache:
            _from_cache(cache[ckey], findings, found, gaps, rel)
        else:
            todo.append((rel, ckey))
            if ckey:
                pending.add(ckey)
    prefetch = getattr(overlay.tree, "prefetch", None)
    if prefetch is not None and (live or markers):
        prefetch([rel for rel, _ in todo if rel not in overlay.texts])
    for rel, ckey in todo:  # with ``maybe``: none of the tests below can pass on the others
        data = overlay.read_bytes(rel)
        if feature_needles and evaluation.feature_file(data, feature_needles):
            feature_hits.append((rel, [m for m in feature_markers if m.encode() in data]))
        # a site's own module holding its function is read even without the markers: a
        # marker renamed there is drift, not "absent"
        hits = [s for s in live if in_site_modules(rel, s) and (is_candidate(data, s) or (
            s.modules and not s.anywhere and hinted(rel, s) and any(f"def {fn}(".encode() in data for fn in s.functions)))]\
            if live and quick.search(data) else []
        if hits or (markers and lint.candidate(data, needles)):
            files[rel] = hits
        elif ckey:
            cache[ckey] = {"f": [], "s": {}}
    feature += evaluation.feature_scope(feature_hits, lambda rel: any(
        s.modules and hinted(rel, s) for s in patch.sites), overlay.scope_notes.setdefault(patch.id, []))
    for rel, sites in files.items():
        text = overlay.read_text(rel)
        new_text, fnd, fsyms = text, [], {}
        if sites:
            new_text, fnd, fsyms = edit_file(text, rel, patch, sites, arch, overlay, pristine, emit=cache is None)
        fgaps = verify.file_gaps(text, new_text, rel, fnd, markers, arch) if markers else []
        findings += fnd
        gaps += fgaps
        for k, v in fsyms.items():
            found.setdefault(k, []).extend(v)
        key = None if rel in overlay.texts or cache is None else overlay.tree.key(rel)
        if key:
            cache[f"{key}:{scope}"] = {
                "f": [[f.site, f.status.value, f.line, f.symbol, f.detail] for f in fnd], "s": fsyms,
                "g": [[g.line, g.function, g.gate, g.reason] for g in fgaps]}
        if new_text != text:
            overlay.check_writable(rel, new_text)
            result.originals.setdefault(rel, text)
            if rel in overlay.sources:
                result.sources.setdefault(rel, overlay.sources[rel])
            overlay.texts[rel] = new_text
            changes[rel] = new_text
    for rel, ckey in dups:
        _from_cache(cache[ckey], findings, found, gaps, rel)
    overlay.found[patch.id] = found
    site_results = [skipped.get(s.name) or _site_result(s, findings, found.get(s.name, []), overlay, paths,
                                                         _other_sites(patch, s))
                    for s in patch.sites]
    status = Status.worst([s.status for s in site_results])
    return PatchResult(patch.id, patch.summary, status, site_results, changes), gaps


PART = 8  # bytes: the length of a substring searched for on behalf of the needles holding it


def _shared_parts(needles: list[bytes | re.Pattern[bytes]]) -> tuple[dict[bytes, list[bytes]], list]:
    """Group byte needles by a common substring of ``PART`` bytes (greedy: the part most
    needles hold first): {part: its needles (two or more)}, and the needles left alone
    (patterns, short ones, those sharing no part)."""
    plain = [n for n in needles if isinstance(n, bytes) and len(n) >= PART]
    alone: list = [n for n in needles if not (isinstance(n, bytes) and len(n) >= PART)]
    shared: dict[bytes, list[bytes]] = {}
    while plain:
        holders: dict[bytes, list[bytes]] = {}
        for n in plain:
            for part in {n[i:i + PART] for i in range(len(n) - PART + 1)}:
                holders.setdefault(part, []).append(n)
        part, members = max(holders.items(), key=lambda kv: (len(kv[1]), kv[0]))
        if len(members) < 2:
            break
        shared[part] = members
        plain = [n for n in plain if n not in members]
    return shared, alone + plain


def _maybe(overlay: _Overlay, feature_needles: list[bytes], live: list[Site], quick: re.Pattern[bytes] | None,
           needles: list[bytes] | None) -> set[str]:
    """The files on which one of ``_run_patch``'s byte tests can pass, from the series'
    index (``_Overlay.holding``, ``defining``): a feature file holds a marker
    (``evaluation.feature_file``), a site file matches ``quick`` (``def NAME(`` of a live
    site's function), a gate-coverage file holds ``is_sm`` and a marker (``lint.candidate``);
    a file an earlier patch edited is always tested. A superset: each file in it is then
    tested as before, so the answers are the same."""
    sites = overlay.defining(sorted({fn for s in live for fn in s.functions})) if live else set()
    if sites is None:  # a function name `\w` does not match: its pattern is searched
        sites = overlay.holding(quick)
    overlay.holding(*feature_needles, *(needles or ()), *([b"is_sm"] if needles else ()))  # in one pass
    out = set(overlay.texts) | overlay.holding(*feature_needles) | sites
    if needles:
        out |= overlay.holding(*needles) & overlay.holding(b"is_sm")
    return out


def _from_cache(entry: Any, findings: list[Finding], found: dict[str, list[str]],
                gaps: list[lint.LintFinding], rel: str) -> None:
    if isinstance(entry, str):
        entry = json.loads(entry)
    for site, status, line, symbol, detail in entry["f"]:
        findings.append(Finding(site, Status(status), line, symbol, detail, rel))
    for k, v in entry["s"].items():
        found.setdefault(k, []).extend(v)
    for line, function, gate, reason in entry.get("g", []):
        gaps.append(lint.LintFinding(rel, line, function, gate, reason))

