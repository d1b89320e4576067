"""``forgepatch cache info`` and ``forgepatch cache prune``."""

from __future__ import annotations

import typer

from forgepatch.cachestore import entries, human, prune, summary
from forgepatch.cli._options import json_option

from forgepatch.cli._state import console, print_json
from forgepatch.paths import cache_dir

cache_app = typer.Typer(rich_markup_mode=None, help="See and prune forgepatch's cache (wheels, trees, contexts, logs, memos).",
                        no_args_is_help=True)


def _root():
    return cache_dir()


def cache_info(as_json: bool = json_option("One JSON document on stdout.")) -> None:
    """What the cache holds, by kind: entries, files, size."""
    root = _root()
    kinds = summary(entries(root))
    total = sum(k["bytes"] for k in kinds.values())
    if as_json:
        print_json({"root": str(root), "bytes": total, "kinds": kinds})
        return
    out = console()
    out.print(f"{root}  {human(total)}", markup=False)
    for name, k in sorted(kinds.items(), key=lambda kv: -kv[1]["bytes"]):
        out.print(f"  {name:<14} {human(k['bytes']):>10}  {k['entries']} entr{'y' if k['entries'] == 1 else 'ies'}, {k['files']} file(s)",
                  markup=False)


def cache_prune(
    older_than: float = typer.Option(30.0, "--older-than", min=0, metavar="DAYS", help="Remove entries unused for DAYS days (default 30)."),
    all_: bool = typer.Option(False, "--all", help="Remove every prunable entry (same as --older-than 0)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """Remove cache entries forgepatch can make again (never locks or a release's pending tags)."""
    root = _root()
    gone = prune(root, 0.0 if all_ else older_than, dry_run)
    freed = sum(e.bytes for e in gone)
    if as_json:
        print_json({"root": str(root), "dry_run": dry_run, "bytes": freed, "removed": [e.to_json() for e in gone]})
        return
    verb = "would remove" if dry_run else "removed"
    out = console()
    for e in gone:
        out.print(f"  {verb} {e.kind}/{e.path.name}  {human(e.bytes)}", markup=False)
    out.print(f"{verb} {len(gone)} entr{'y' if len(gone) == 1 else 'ies'}, {human(freed)}", markup=False)


def register(app: typer.Typer) -> None:
    cache_app.command("info")(cache_info)
    cache_app.command("prune")(cache_prune)
    app.add_typer(cache_app, name="cache")
