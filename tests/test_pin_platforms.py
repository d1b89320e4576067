"""Pins per platform, on real wheels of SGLang 0.5.23 (cp311/cp312 x x86_64/aarch64, each with
its own sha256): `pin add --pypi` records every wheel by tag; `apply --pin` checks the wheel it
uses against the pin and refuses another one (exit 2, both digests); `pin update` records them
again. The aarch64 wheel is fetched by the test itself with `pip download --python-version
--platform`, so the recorded digest is checked against bytes forgepatch did not provide."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from support.cli import assert_one_line_error, forgepatch

ROOT = Path(__file__).resolve().parents[1]
MATRIX = """\
default_pin = "seed"

[pins.seed]
pypi = "0.5.23"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "example.invalid/sglang:latest"
profiles = ["ok"]

[profiles.ok]
kind = "command"
command = "true"
gpus = 0
"""
X86_311, X86_312, ARM_312 = "cp311-manylinux_2_34_x86_64", "cp312-manylinux_2_34_x86_64", "cp312-manylinux_2_34_aarch64"


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(tmp: Path, python: str, platform: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                    python, "--platform", platform, "-d", str(tmp), "sglang==0.5.23"], check=True, capture_output=True)
    return next(tmp.glob("sglang-*.whl"))


def test_pin_records_every_wheel_and_apply_checks_the_one_it_uses(tmp_path):
    from forgepatch.sources import pypi_wheel

    repo = tmp_path / "fork"
    repo.mkdir()
    (repo / "matrix.toml").write_text(MATRIX)
    r = forgepatch("pin", "add", "p23", "--pypi", "0.5.23", "--json", cwd=repo, env=env())
    assert r.rc == 0, r.err
    pin = tomllib.loads((repo / "matrix.toml").read_text())["pins"]["p23"]
    wheels = pin["wheels"]
    assert {X86_311, X86_312, ARM_312, "cp311-manylinux_2_34_aarch64"} <= set(wheels)
    assert len(set(wheels.values())) == len(wheels)  # one digest per wheel: they all differ
    arm = fetch(tmp_path / "arm", "3.12", "manylinux_2_34_aarch64")  # bytes forgepatch did not fetch
    assert arm.name.endswith("cp312-manylinux_2_34_aarch64.whl") and wheels[ARM_312] == sha(arm)
    x86 = fetch(tmp_path / "x86", "3.12", "manylinux_2_34_x86_64")
    assert wheels[X86_312] == sha(x86)
    host = pypi_wheel("0.5.23")  # the wheel apply uses here
    host_tag = re.sub(r"^sglang-0\.5\.23-(\w+)-\w+-(.+)\.whl$", r"\1-\2", host.name)
    assert wheels[host_tag] == sha(host) == pin["sha256"]

    ok = forgepatch("apply", "--arch", "sm120", "--pin", "p23", "--check", cwd=repo, env=env())
    assert ok.rc == 1, ok.err  # the pinned wheel: checked, and it still needs patching

    # the pin names another wheel for this host's tag (the aarch64 one): refused, both digests
    text = (repo / "matrix.toml").read_text()
    (repo / "matrix.toml").write_text(text.replace(f'{host_tag} = "{wheels[host_tag]}"', f'{host_tag} = "{wheels[ARM_312]}"'))
    bad = forgepatch("apply", "--arch", "sm120", "--pin", "p23", "--check", cwd=repo, env=env())
    assert_one_line_error(bad, 2, f"pins.p23.wheels.{host_tag}", wheels[ARM_312][:16], sha(host)[:16], "not the pinned wheel")

    # a pin without this host's tag says so
    (repo / "matrix.toml").write_text(text.replace(f'{host_tag} = "{wheels[host_tag]}"\n', ""))
    gone = forgepatch("apply", "--arch", "sm120", "--pin", "p23", "--check", cwd=repo, env=env())
    assert_one_line_error(gone, 2, f"records no wheel for {host_tag}", "pin update p23")

    # `pin update` records them again
    up = forgepatch("pin", "update", "p23", cwd=repo, env=env())
    assert up.rc == 0, up.err
    assert tomllib.loads((repo / "matrix.toml").read_text())["pins"]["p23"]["wheels"] == wheels
    assert forgepatch("apply", "--arch", "sm120", "--pin", "p23", "--check", cwd=repo, env=env()).rc == 1


def test_a_pin_recorded_for_another_platform_is_refused_not_used(tmp_path):
    """A pin made before per-platform pins, on a Python 3.12 host (its sha256 is the cp312 wheel's):
    on this host apply says so instead of silently using another wheel."""
    repo = tmp_path / "fork"
    repo.mkdir()
    other = sha(fetch(tmp_path / "x86", "3.12", "manylinux_2_34_x86_64"))
    from forgepatch.sources import pypi_wheel

    if sha(pypi_wheel("0.5.23")) == other:  # this host is cp312 x86_64: take the cp311 wheel as "other"
        other = sha(fetch(tmp_path / "x86-311", "3.11", "manylinux_2_34_x86_64"))
    (repo / "matrix.toml").write_text(MATRIX.replace('pypi = "0.5.23"\n', f'pypi = "0.5.23"\nsha256 = "{other}"\n', 1))
    r = forgepatch("apply", "--arch", "sm120", "--pin", "seed", "--check", cwd=repo, env=env())
    assert_one_line_error(r, 2, "pins.seed.sha256", other[:16], "another wheel", "pin update seed")
