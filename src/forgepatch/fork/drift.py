"""``forgepatch drift``: the health of every patch of an arch at many revisions, read from
git objects without checking anything out, and each patch's health over time.

Two memo layers make scans over hundreds of nightlies cheap, both in ``cache_dir("drift")``
(safe to delete):
- per file: the engine memoises its scan of a file by (blob id, patch hash, arch), so a
  blob shared by many revisions is parsed once;
- per package tree: a revision whose ``python/sglang`` tree id, patch files, version and
  engine code were all seen before is answered without running the engine at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch import progress
from forgepatch.arch import get_arch
from forgepatch.patching.model import FAILED  # statuses that fail a run (exit 1)
from forgepatch.patching.identity import engine_digest
from forgepatch.errors import BadInput
from forgepatch.gates.features import Features, feature_changes
from forgepatch.gates.render import arches
from forgepatch.gates.service import tree_inventory
from forgepatch.infra.gitrepo import GitRepo
from forgepatch.packages import get, names
from forgepatch.patching.editset import Edit
from forgepatch.patching.patchset import load_patches, patch_files
from forgepatch.patching.series import for_package, load_series, run_series

SHORT = {
    "applied": "applies",
    "already-applied": "already",
    "absorbed-upstream": "absorbed",
    "not-applicable": "n/a",
    "ignored": "ignored",
    "incomplete": "INCOMPLETE",
    "unverified": "UNVERIFIED",
    "wrong": "WRONG",
    "drift": "DRIFT",
    "review": "REVIEW",
}


@dataclass
class RevHealth:
    rev: str  # as given (or the SHA for --since walks)
    sha: str
    label: str  # tag or short SHA
    version: str | None
    patches: list[dict[str, Any]]  # PatchResult.to_json() without "files"
    memo: bool = False  # answered from the per-tree memo

    def status(self, patch_id: str) -> str | None:
        for p in self.patches:
            if p["patch"] == patch_id:
                return p["status"]
        return None

    def to_json(self) -> dict[str, Any]:
        return {"rev": self.rev, "sha": self.sha, "label": self.label, "version": self.version,
                "patches": self.patches}


@dataclass
class PatchHealth:
    patch: str
    summary: str
    first_drift: str | None  # label of the first rev where it drifted
    first_absorbed: str | None  # label of the first rev where upstream absorbed it
    last_status: str | None
    retire: bool  # absorbed at the newest rev: upstream carries it, drop the patch

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class DriftReport:
    arch: str
    patch_ids: list[str]
    patchset: str
    revs: list[RevHealth] = field(default_factory=list)
    health: list[PatchHealth] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    gates: list | None = None  # --gates: forgepatch.gates.features.StepChanges per revision step

    @property
    def drift(self) -> bool:
        return any(r.status(p) in FAILED for r in self.revs for p in self.patch_ids)

    def failures(self) -> dict[str, list[str]]:
        """Each failing revision's label (report order) -> the failed statuses of its patches
        (drift, incomplete, unverified, wrong, review: every one that makes ``drift`` true)."""
        out: dict[str, list[str]] = {}
        for r in self.revs:
            kinds = [k for k in FAILED if any(r.status(pid) == k for pid in self.patch_ids)]
            if kinds:
                out.setdefault(r.label, [])
                out[r.label] += [k for k in kinds if k not in out[r.label]]
        return out

    def summary(self, shown: int = 5) -> str:
        """One line for a failing report: which statuses at how many of the revisions, the
        first ``shown`` of them named (``review at 1 of 2 revision(s): 1a2b3c4d5e6f (review)``)."""
        failed = self.failures()
        kinds = [k for k in FAILED if any(k in v for v in failed.values())]
        labels = list(failed)
        return (f"{' or '.join(kinds)} at {len(labels)} of {len(self.revs)} revision(s): "
                + ", ".join(f"{label} ({'/'.join(failed[label])})" for label in labels[:shown])
                + (" ..." if len(labels) > shown else ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "patchset": self.patchset,
            "drift": self.drift,
            "patches": self.patch_ids,
            "revs": [r.to_json() for r in self.revs],
            "health": [h.to_json() for h in self.health],
            "cache": self.stats,
            **({"gates": [step.to_json() for step in self.gates]} if self.gates is not None else {}),
        }


# -- choosing revisions --------------------------------------------------------------------
def select_revs(repo: GitRepo, revs: list[str] | None, since: str | None, every: int, until: str | None) -> list[tuple[str, str]]:
    """[(rev as given, full SHA)] in the order they are reported (oldest first for walks)."""
    if revs and since:
        raise BadInput("drift: give --revs or --since, not both")
    if revs:
        return [(r, repo.resolve(r, "--revs")) for r in revs]
    if not since:
        raise BadInput("drift: give --revs R1,R2,... or --since REV [--every N]")
    if every < 1:
        raise BadInput("--every: must be >= 1")
    chain = repo.first_parent(since, until or "HEAD")
    picked = chain[::every]
    if picked[-1] != chain[-1]:
        picked.append(chain[-1])  # always report the newest revision
    return [(sha, sha) for sha in picked]


# -- the scan ------------------------------------------------------------------------------
def patch_files_digest(patches_dir, ids: list[str]) -> str:
    """Hash of the patch files of the series (bytes), without loading them (``patches_dir``:
    a ``PatchLibrary`` or a directory; the file the library resolves each id to counts)."""
    files = patch_files(patches_dir)
    digest = hashlib.sha256()
    for pid in ids:
        path = files.get(pid)
        if path is not None and path.is_file():
            digest.update(pid.encode() + b"\0" + path.suffix.encode() + b"\0" + path.read_bytes() + b"\0")
            lock = path.with_suffix(".lock")  # the edit lock decides `review`: a new lock, a new verdict
            if lock.is_file():
                digest.update(b"lock\0" + lock.read_bytes() + b"\0")
    return digest.hexdigest()


def scan(
    repo_path: Path,
    arch_name: str,
    matrix,
    patches_dir: Path,
    revs: list[str] | None = None,
    since: str | None = None,
    every: int = 1,
    until: str | None = None,
    cache=None,
    tree_memo: bool = True,
    gates: bool = False,
    package: str = "sglang",
) -> DriftReport:
    """Run the arch's patch series on the package at every selected revision; with
    ``gates``, also the arch gates of the patches' features that changed between revisions.

    ``package``: whose part of the series runs, on that package's directory of ``repo_path``
    (``[packages.NAME] package_dir``; a FlashInfer checkout for ``flashinfer``)."""
    arch = get_arch(arch_name)
    info = get(package, matrix)
    if info is None:
        raise BadInput(f"--package: unknown package {package!r} (known: {', '.join(names(matrix))})")
    if gates and package != "sglang":
        raise BadInput(f"--gates inventories SGLang's arch gates; for {package}'s arch lists run "
                       f"`forgepatch gates --package {package} --arch {arch.name}` on a revision")
    ids = list(matrix.arch(arch.name).patches)
    engine = _Engine(matrix, patches_dir, arch, package) if package != "sglang" else None
    if engine is not None:
        ids = [p.id for p in engine.series.patches]  # the package's part: what this repository can hold
    with GitRepo(repo_path) as repo:
        picked = select_revs(repo, revs, since, every, until)
        trees = [(rev, sha, _tree(repo, sha, info.package_dir, package)) for rev, sha in picked]
        memo_base = None
        if cache is not None and tree_memo:
            memo_base = hashlib.sha256(
                f"{arch.name}\0{package}\0{patch_files_digest(patches_dir, ids)}\0{engine_digest()}".encode()
            ).hexdigest()
        steps = []  # (label, tree, version) for the gate inventories
        report = DriftReport(arch.name, ids, "")
        stats = {"revs": len(trees), "tree_memo_hits": 0, "engine_runs": 0}

        for rev, sha, tree in progress.track(trees, f"patching {len(trees)} revision(s) for {arch.name}"):
            version = tree.version()
            key = f"drift-tree:{memo_base}:{tree.tree_id}:{version}" if memo_base else None
            doc = _memo_get(cache, key)
            from_memo = doc is not None
            if from_memo:
                stats["tree_memo_hits"] += 1
            else:
                if engine is None:
                    engine = _Engine(matrix, patches_dir, arch, package)
                result = engine.run(tree, version, cache)
                stats["engine_runs"] += 1
                doc = {"patchset": result.patchset_hash or engine.patchset,
                       "patches": [_patch_doc(p) for p in result.patches]}
                if key is not None:
                    cache[key] = doc
            report.patchset = report.patchset or doc["patchset"]
            label = rev if rev != sha else repo.describe(sha)
            report.revs.append(RevHealth(rev, sha, label, version, doc["patches"], memo=from_memo))
            steps.append((label, tree, version))
        if gates:
            with progress.task(f"reading the arch gates of {len(steps)} revision(s)"):
                report.gates = gate_steps(steps, patches_dir, ids, cache)
        if engine is not None and not report.patchset:
            report.patchset = engine.patchset
        if hasattr(cache, "hits"):
            stats["blob_hits"], stats["blob_misses"] = cache.hits, cache.misses
        report.stats = stats
        report.health = health_over_time(report)
    return report


def gate_steps(steps, patches_dir: Path, ids: list[str], cache) -> list:
    """Feature gate changes between consecutive revisions (forgepatch.gates.features)."""
    features = Features.of(load_patches(patches_dir, ids))
    return feature_changes([tree_inventory(tree, label, version, cache) for label, tree, version in steps], features)


class _Engine:
    """Lazily loaded patch engine (libcst) for revisions the tree memo cannot answer."""

    def __init__(self, matrix, patches_dir: Path, arch, package: str = "sglang"):
        self._run = run_series
        # drift scans one package's repository: that package's part of the series
        self.series = for_package(load_series(matrix, arch, patches_dir), package, matrix, "--package")
        self.patchset = self.series.hash

    def run(self, tree, version, cache):
        # status only, memo or not: a scan needs verdicts, never texts (and its report is
        # then the same with --no-cache as with the memo)
        return self._run(self.series, tree, version, cache=cache if cache is not None else {})


def _tree(repo, sha: str, package_dir: str, package: str):
    if package == "sglang":
        return repo.tree(sha, package_dir)
    try:
        return repo.tree(sha, package_dir)
    except BadInput:
        raise BadInput(f"--repo: no {package} package at {package_dir}/ in {repo.root} at {sha[:12]} "
                       f"([packages.{package}] package_dir)") from None


def _memo_get(cache, key: str | None):
    if cache is None or key is None:
        return None
    try:
        return cache[key]
    except KeyError:
        return None


def _patch_doc(patch) -> dict[str, Any]:
    doc = patch.to_json()
    doc.pop("files", None)
    return doc


def health_over_time(report: DriftReport) -> list[PatchHealth]:
    """For each patch: the first rev where it drifted, the first where upstream absorbed
    it, and whether it can be retired (absorbed at the newest rev)."""
    out = []
    for pid in report.patch_ids:
        summary, first_drift, first_absorbed, last = "", None, None, None
        for rev in report.revs:
            for p in rev.patches:
                if p["patch"] == pid:
                    summary = summary or p.get("summary", "")
            status = rev.status(pid)
            if status in ("drift", "incomplete", "review") and first_drift is None:
                first_drift = rev.label
            if status == "absorbed-upstream" and first_absorbed is None:
                first_absorbed = rev.label
            last = status
        out.append(PatchHealth(pid, summary, first_drift, first_absorbed, last, last == "absorbed-upstream"))
    return out


# -- rendering -----------------------------------------------------------------------------
def _candidates(report: DriftReport) -> list[str]:
    """One line per distinct drift finding, naming the revisions that share it (the same
    candidates at twenty nightlies are one line, not twenty)."""
    groups: dict[str, list[int]] = {}
    for i, rev in enumerate(report.revs):
        for p in rev.patches:
            for site in p.get("sites", []):
                if site.get("status") == "drift":
                    cands = ", ".join(site.get("candidates") or []) or "none"
                    text = f"{p['patch']} site {site.get('site')}: {site.get('detail') or 'not found'}; candidates: {cands}"
                elif site.get("status") == "incomplete":
                    text = f"{p['patch']} incomplete: {site.get('detail')}"
                elif site.get("status") in ("review", "unverified", "wrong"):
                    text = f"{p['patch']} {site.get('status')}: {site.get('detail')}"
                else:
                    continue
                seen = groups.setdefault(text, [])
                if i not in seen:
                    seen.append(i)
    return [f"{_rev_runs(report, idx)}: {text}" for text, idx in groups.items()]


def _rev_runs(report: DriftReport, idx: list[int]) -> str:
    """Revision labels for positions ``idx`` of the report: consecutive ones as ``A..B``."""
    runs: list[list[int]] = []
    for i in idx:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [report.revs[r[0]].label if len(r) == 1 else
             f"{report.revs[r[0]].label}..{report.revs[r[-1]].label}" for r in runs]
    text = ", ".join(parts)
    return f"{text} ({len(idx)} revisions)" if len(idx) > 1 else text


def edit_set_changes(report: DriftReport) -> list[str]:
    """One line per patch and pair of revisions (in report order) between which the patch's
    edit set changed: the edits that appeared (+) and went (-). Revisions where the patch
    changes nothing (already applied, absorbed, failed) do not break the comparison."""
    out = []
    for pid in report.patch_ids:
        last = None  # (label, digest, edits)
        for rev in report.revs:
            doc = next((p for p in rev.patches if p["patch"] == pid), None)
            if not doc or not doc.get("edit_set"):
                continue
            edits = [Edit.from_doc(e) for e in doc.get("edits", [])]
            if last is not None and last[1] != doc["edit_set"]:
                old = {e.key for e in last[2]}
                new = {e.key for e in edits}
                plus = [f"+ {e.function}: {e.describe()}" for e in edits if e.key not in old]
                minus = [f"- {e.function}: {e.describe()}" for e in last[2] if e.key not in new]
                out.append(f"{pid} edit set {last[1]} -> {doc['edit_set']} ({last[0]} -> {rev.label}): "
                           + "; ".join(plus + minus))
            last = (rev.label, doc["edit_set"], edits)
    return out


def _gate_lines(report: DriftReport, markdown: bool) -> list[str]:
    """The gate section: arch sets of the patches' features that changed between revisions."""
    if report.gates is None:
        return []

    head = "#### arch gates of the patched features" if markdown else "arch gates of the patched features:"
    out = ["", head, ""] if markdown else [head]
    if not report.gates:
        return out + ["no arch set changed between these revisions"]
    bullet = "- " if markdown else "  "
    for step in report.gates:
        for p in step.predicates:
            out.append(f"{bullet}{step.old} -> {step.new}: predicate {p.name} {' '.join(p.old.arches)} -> "
                       f"{' '.join(p.new.arches)}; guards {', '.join(g.function for g in p.guards)}")
        for c in step.changes:
            out.append(f"{bullet}{step.old} -> {step.new}: {c.new.where} {c.new.function}: {arches(c.old)} -> {arches(c.new)}")
    return out


def render_markdown(report: DriftReport) -> str:
    """A PR-comment-ready Markdown document."""
    verdict = "drift" if report.drift else "healthy"
    out = [f"### forgepatch drift: {report.arch} ({verdict})", ""]
    out.append("| rev | version | " + " | ".join(f"`{p}`" for p in report.patch_ids) + " |")
    out.append("|---|---|" + "---|" * len(report.patch_ids))
    for rev in report.revs:
        cells = []
        for pid in report.patch_ids:
            status = rev.status(pid) or "-"
            short = SHORT.get(status, status)
            cells.append(f"**{short}**" if status in FAILED and status != "review" else short)
        out.append(f"| `{rev.label}` | {rev.version or '?'} | " + " | ".join(cells) + " |")
    out += ["", "| patch | first drift | first absorbed | advice |", "|---|---|---|---|"]
    for h in report.health:
        advice = "retire this patch (upstream absorbed it)" if h.retire else ("fix the patch" if h.last_status in FAILED and h.last_status != "review" else "review the edit set" if h.last_status == "review" else "keep")
        out.append(f"| `{h.patch}` | {h.first_drift or '-'} | {h.first_absorbed or '-'} | {advice} |")
    changes = edit_set_changes(report)
    if changes:
        out += ["", "#### edit set changes", ""] + [f"- {line}" for line in changes]
    out += _gate_lines(report, markdown=True)
    cands = _candidates(report)
    if cands:
        out += ["", "<details><summary>drift candidates</summary>", ""]
        out += [f"- {line}" for line in cands]
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


def render_table(report: DriftReport, console) -> None:
    from rich.table import Table

    styles = {"drift": "bold red", "incomplete": "bold red", "unverified": "bold red", "wrong": "bold red", "review": "bold magenta", "applied": "green", "already-applied": "cyan",
              "absorbed-upstream": "yellow", "not-applicable": "dim"}
    table = Table(title=f"patch health for {report.arch}", title_justify="left")
    table.add_column("rev")
    table.add_column("version")
    for pid in report.patch_ids:
        table.add_column(pid)
    for rev in report.revs:
        cells = []
        for pid in report.patch_ids:
            status = rev.status(pid) or "-"
            cells.append(f"[{styles.get(status, '')}]{SHORT.get(status, status)}[/]" if status in styles else status)
        from rich.markup import escape

        table.add_row(escape(rev.label), escape(rev.version or "?"), *cells)
    console.print(table)
    health = Table(title="health over time", title_justify="left")
    for col in ("patch", "first drift", "first absorbed", "advice"):
        health.add_column(col)
    for h in report.health:
        advice = "[yellow]retire this patch[/]" if h.retire else ("[red]fix the patch[/]" if h.last_status in FAILED and h.last_status != "review" else "[magenta]review the edit set[/]" if h.last_status == "review" else "keep")
        health.add_row(h.patch, h.first_drift or "-", h.first_absorbed or "-", advice)
    console.print(health)
    from rich.markup import escape

    for line in _candidates(report):
        console.print(f"[red]drift[/] {escape(line)}", soft_wrap=True)
    for line in edit_set_changes(report):
        console.print(f"[magenta]edit set[/] {escape(line)}", soft_wrap=True)
    for line in _gate_lines(report, markdown=False):
        console.print(line, markup=False, highlight=False)
