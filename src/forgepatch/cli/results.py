"""``forgepatch results merge``: shard results into one document (for release and reports)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forgepatch.cli._options import json_option, markdown_out_option, old_spelling, renamed

from forgepatch.cli._state import print_json
from forgepatch.errors import BadInput
from forgepatch.infra.journal import write_together
from forgepatch.paths import check_output
from forgepatch.smoke import report
from forgepatch.smoke.merge import merge

results_app = typer.Typer(rich_markup_mode=None, help="Work with smoke results files.", no_args_is_help=True)


def merge_cmd(
    files: List[Path] = typer.Argument(..., help="Results files (`forgepatch smoke --json` of each shard)."),
    out: Path = typer.Option(..., "--out", help="Write the merged results here ('-': stdout, the document only)."),
    markdown: Optional[Path] = markdown_out_option(),
    markdown_old: Optional[Path] = old_spelling("--markdown"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML."),
    as_json: bool = json_option("Print the merged document on stdout too."),
) -> None:
    """Merge shard results into one document; shards of one run come back in the unsharded
    order. Two different results for one job are refused (exit 2)."""
    target = check_output(out, "--out", stdout_ok=True)  # None: stdout
    markdown = renamed(markdown, markdown_old, "--markdown", "--markdown-out")
    markdown = check_output(markdown, "--markdown-out") if markdown else None
    junit = check_output(junit, "--junit") if junit else None
    merged = merge(list(files))
    if target is None:
        if markdown or junit:
            raise BadInput("--out -: the merged document goes to stdout; write --markdown/--junit with --out FILE")
        typer.echo(merged.doc.dumps(), nl=False)
        return
    outputs = {target: merged.doc.dumps()}  # all written or none, even across a crash (forgepatch.infra.journal)
    if markdown:
        outputs[markdown] = report.to_markdown(merged.doc.jobs)
    if junit:
        outputs[junit] = report.to_junit(merged.doc.jobs)
    write_together(outputs, "results merge")
    if as_json:
        print_json(merged.doc.to_json())
        return
    missing = f"; {merged.missing} job(s) of the plan are in none of them" if merged.missing else ""
    typer.echo(f"merged {len(merged.doc.jobs)} job(s) from {merged.files} file(s) into {out}{missing}", err=True)
    typer.echo(report.to_markdown(merged.doc.jobs), nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
    results_app.command("merge")(merge_cmd)
