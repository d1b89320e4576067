"""``forgepatch probe``: run the graph-capture probe on this host through the local runner."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli._options import arch_option, json_option
from forgepatch.cli._state import console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.inimage.probe_result import format_summary
from forgepatch.paths import check_output
from forgepatch.smoke.runners import probe_command, probe_env, run_local


def probe(
    arch: Optional[str] = arch_option(None, help="Expected arch (default $FORGEPATCH_ARCH)."),
    gpus: int = typer.Option(1, "--gpus", help="GPUs to use; >= 2 adds the NCCL all-reduce check."),
    replays: int = typer.Option(20, "--replays", help="Graph replays per check."),
    deadline: float = typer.Option(120.0, "--deadline", help="Seconds each check (and each rank) may take."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds the whole probe may take before it is killed."),
    log: Optional[Path] = typer.Option(None, "--log", help="Also write the probe's output to this file."),
    as_json: bool = json_option("Print the probe's JSON document."),
) -> None:
    """Capture and replay CUDA graphs (bf16 bmm, an MLP block, NCCL all-reduce) and compare
    with eager mode. Exit 0 pass, 1 fail, 3 incompatible or no GPU."""
    import sys

    if replays < 1:
        raise BadInput(f"--replays must be >= 1 (got {replays})")
    if gpus < 1:
        raise BadInput(f"--gpus must be >= 1 (got {gpus})")
    if timeout <= 0:
        raise BadInput(f"--timeout must be > 0 (got {timeout})")
    if log is not None:
        check_output(log, "--log")
    err = console(stderr=True)

    def show(stream: str, line: str) -> None:
        if stream == "stderr":  # phase lines and diagnostics; stdout is the JSON document
            err.print(line, markup=False)

    job = run_local(probe_command(arch=arch, gpus=gpus, replays=replays, deadline=deadline),
                    timeout_s=timeout, env=probe_env(), on_line=show, log_path=log)
    if job.interrupted:
        raise typer.Exit(130)
    if job.timed_out:
        raise Failure(f"probe did not finish within {timeout:g} s (last phase: {job.last_phase or 'start'})")
    if job.exit_code == 2:
        msg = next((l for l in reversed(job.stderr_tail) if "error:" in l), "bad input")
        raise BadInput(msg.split("error:", 1)[1].strip())
    if job.document is None:
        raise Failure(f"probe exited with code {job.exit_code} without a JSON document"
                      f" (last phase: {job.last_phase or 'start'})")
    if as_json:
        print_json(job.document)
    else:
        sys.stdout.write(format_summary(job.document) + "\n")
    raise typer.Exit(job.exit_code if job.exit_code is not None else 1)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
