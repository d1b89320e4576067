"""Which GPUs this host can hand to smoke jobs (the slots the matrix schedules over)."""

from __future__ import annotations

import os
import shutil
import subprocess

from forgepatch.errors import BadInput


def host_gpus() -> list[int]:
    """GPU indices: ``$FORGEPATCH_GPUS`` ("0,1,2" or "none") if set, else ``nvidia-smi``."""
    env = os.environ.get("FORGEPATCH_GPUS")
    if env is not None:
        if env.strip().lower() in ("", "none"):
            return []
        try:
            return [int(x) for x in env.split(",") if x.strip()]
        except ValueError:
            raise BadInput(f"FORGEPATCH_GPUS={env!r}: want a comma-separated list of GPU indices or 'none'") from None
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in out.stdout.split() if x.strip().isdigit()] if out.returncode == 0 else []


def check_gpus(jobs, available: list[int], where: str) -> None:
    """BadInput (one line) if a job asks for more GPUs than exist."""
    need = max((j.gpus for j in jobs), default=0)
    if need > len(available):
        worst = next(j for j in jobs if j.gpus == need)
        have = f"{len(available)} ({','.join(map(str, available))})" if available else "none (no nvidia-smi, FORGEPATCH_GPUS unset)"
        raise BadInput(f"profile {worst.profile!r} asks for {need} GPU(s) but {where} has {have}")
