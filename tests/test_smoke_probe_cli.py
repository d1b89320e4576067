"""The probe as a process: ``python -m forgepatch.inimage.probe`` and ``forgepatch probe``.

CI has no GPU: the probe must answer no-gpu with exit 3 and a JSON document. Device-dependent
decisions are exercised against tests/support/fake_torch, a named test double of torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
FAKE_TORCH = ROOT / "tests" / "support" / "fake_torch"


def _env(*front: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORGEPATCH_ARCH", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*front, SRC))
    env.update(extra)
    return env


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forgepatch.inimage.probe", *args], capture_output=True,
                          text=True, env=env or _env(), timeout=120)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from forgepatch.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env or _env(), timeout=120)


def test_no_gpu_here_exit_3_with_json_document():
    res = probe("--json")
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "no-gpu" and doc["exit_code"] == 3
    assert doc["reason"].startswith(("torch is not importable", "no CUDA device"))
    assert doc["checks"] == [] and doc["schema"] == "forgepatch.probe/1"
    assert "[forgepatch-probe] phase=import check=torch begin" in res.stderr
    assert "phase=verdict verdict=no-gpu" in res.stderr


def test_cpu_only_torch_is_no_gpu():
    """With a real (CPU) torch build, when one is installed: no-gpu with torch's version."""
    site = os.environ.get("FORGEPATCH_TEST_TORCH")  # tests/run.sh installs a CPU torch there
    if not site:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            if os.environ.get("FORGEPATCH_STRICT"):
                pytest.fail("a CPU torch is required (tests/run.sh installs it)")
            pytest.skip("torch is not installed here; the no-torch path is tested above")
        site = str(Path(spec.origin).parents[1])
    res = probe("--json", env=_env(Path(site)))
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "no-gpu" and doc["reason"].startswith("no CUDA device")
    assert doc["versions"]["torch"] and "phase=detect" in res.stderr


def test_no_gpu_summary_names_the_reason():
    res = probe()
    assert res.returncode == 3
    assert res.stdout.startswith("forgepatch probe: NO-GPU")


@pytest.mark.parametrize(
    "args, env_extra, message",
    [
        (["--arch", "sm999"], {}, "--arch: unknown arch 'sm999'"),
        ([], {"FORGEPATCH_ARCH": "gfx942"}, "FORGEPATCH_ARCH: unknown arch 'gfx942'"),
        (["--replays", "-3"], {}, "--replays must be >= 1 (got -3)"),
        (["--gpus", "0"], {}, "--gpus must be >= 1"),
        (["--gpus", "two"], {}, "invalid int value"),
        (["--frobnicate"], {}, "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, env_extra, message):
    res = probe(*args, env=_env(**env_extra))
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_arch_from_env_is_reported():
    res = probe("--json", env=_env(FAKE_TORCH, FORGEPATCH_ARCH="sm_90", FAKE_TORCH_CC=""))
    doc = json.loads(res.stdout)
    assert doc["expected_arch"] == "sm90" and doc["expected_arch_source"] == "FORGEPATCH_ARCH"


# -- against the torch test double -----------------------------------------------------------

def test_gpus_beyond_the_machine_is_bad_input():
    res = probe("--gpus", "4", env=_env(FAKE_TORCH, FAKE_TORCH_CC="9.0,9.0"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == "forgepatch-probe: error: --gpus 4: this machine has 2 GPU(s)"


def test_image_arch_other_than_the_device_is_incompatible_exit_3():
    res = probe("--json", "--arch", "sm120", env=_env(FAKE_TORCH, FAKE_TORCH_CC="9.0",
                                                       FAKE_TORCH_ARCH_LIST="sm_80 sm_90 sm_100 sm_120"))
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "incompatible" and doc["checks"] == []
    assert "sm_120a" in doc["reason"] and "sm_90" in doc["reason"]
    assert doc["devices"][0]["cc"] == "9.0" and doc["devices"][0]["arch"] == "sm90"
    assert doc["versions"]["nccl"] == "2.28.9"
    assert doc["compatibility"]["ok"] is False


def test_torch_without_a_target_for_the_device_is_incompatible():
    # A B300 (10.3) with a torch built only for Hopper and arch-specific sm_100a.
    res = probe("--json", env=_env(FAKE_TORCH, FAKE_TORCH_CC="10.3", FAKE_TORCH_ARCH_LIST="sm_90 sm_100a"))
    assert res.returncode == 3
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "incompatible" and "no target in [sm_90, sm_100a] runs on sm_103" in doc["reason"]


# -- the CLI through the local runner ----------------------------------------------------------

def test_forgepatch_probe_no_gpu_exit_3(tmp_path):
    log = tmp_path / "probe.log"
    res = cli("probe", "--json", "--log", str(log))
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "no-gpu"
    assert "phase=import" in res.stderr  # streamed
    assert "phase=verdict verdict=no-gpu" in log.read_text()


def test_forgepatch_probe_incompatible_summary():
    res = cli("probe", "--arch", "sm103", env=_env(FAKE_TORCH, FAKE_TORCH_CC="9.0"))
    assert res.returncode == 3
    assert res.stdout.startswith("forgepatch probe: INCOMPATIBLE")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--arch", "sm999"], "unknown arch 'sm999'"),
        (["--replays", "-1"], "--replays must be >= 1"),
        (["--gpus", "3"], "--gpus 3: this machine has 1 GPU(s)"),  # reported by the probe itself
    ],
)
def test_forgepatch_probe_bad_input_exit_2(args, message):
    res = cli("probe", *args, env=_env(FAKE_TORCH, FAKE_TORCH_CC="9.0"))
    assert res.returncode == 2, res.stderr
    assert message in res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr


def test_probe_module_imports_only_stdlib_and_forgepatch():
    code = ("import sys, forgepatch.inimage.probe, forgepatch.smoke.runners, forgepatch.inimage.probe_checks; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'typer', 'rich', 'click', 'libcst', 'git', 'docker', 'pydantic', 'tomlkit')); print(bad)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr
