"""A plain (non-editable) install carries the shipped patches, matrix and Dockerfile (real
top-level directories of the repository, force-included into the wheel) and the in-image
package, and works from any directory."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_data_are_real_top_level_directories():
    for name in ("matrix.toml", "patches", "dockerfiles"):
        assert (ROOT / name).exists() and not (ROOT / name).is_symlink(), name
    assert not (ROOT / "src" / "forgepatch" / "data").exists()  # only the wheel has forgepatch/data/
    from forgepatch.paths import SHIPPED_DOCKERFILE, SHIPPED_MATRIX, SHIPPED_PATCHES

    assert SHIPPED_MATRIX == ROOT / "matrix.toml" and SHIPPED_PATCHES == ROOT / "patches"
    assert SHIPPED_DOCKERFILE == ROOT / "dockerfiles" / "Dockerfile"


def test_wheel_install_works_from_any_directory(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", ROOT],
                   check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("forgepatch-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("forgepatch/data/matrix.toml", "forgepatch/data/dockerfiles/Dockerfile",
                 "forgepatch/data/patches/sm120-flashinfer-allreduce-fusion.toml",
                 "forgepatch/data/patches/sm103-ep-cuda-graph-guard.py", "forgepatch/data/dockerfiles/install.py",
                 "forgepatch/inimage/probe.py", "forgepatch/inimage/server.py",
                 "forgepatch/combination/__init__.py", "forgepatch/combination/results.py"):
        assert data in names, data
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], check=True, capture_output=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([py, "-c", "import forgepatch; print(forgepatch.__file__)"], cwd=work,
                           capture_output=True, text=True, check=True).stdout
    assert str(env_dir) in where  # the installed copy, not the checkout
    out = subprocess.run([py, "-m", "forgepatch", "patch", "list", "--json"], cwd=work,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "sm120-flashinfer-allreduce-fusion" in out.stdout
    check = subprocess.run([py, "-m", "forgepatch", "apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check"],
                           cwd=work, capture_output=True, text=True)
    assert check.returncode == 1, check.stderr  # the release is not patched yet: exit 1, nothing written
    assert not any(work.iterdir())
    paths = subprocess.run([py, "-c", "from forgepatch import paths; print(paths.SHIPPED_MATRIX, paths.IMAGE_INSTALLER)"],
                           cwd=work, capture_output=True, text=True, check=True).stdout.split()
    assert all(p.startswith(str(env_dir)) and Path(p).is_file() for p in paths), paths
    init = subprocess.run([py, "-m", "forgepatch", "init", "--json"], cwd=work, capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    assert (work / "dockerfiles" / "Dockerfile").read_bytes() == (ROOT / "dockerfiles" / "Dockerfile").read_bytes()
    # init copies the shipped matrix (every shipped arch) and leaves patches/ to the fork's own
    assert (work / "matrix.toml").read_bytes() == (ROOT / "matrix.toml").read_bytes()
    assert [p.name for p in (work / "patches").iterdir()] == ["README.md"]
    listed = subprocess.run([py, "-m", "forgepatch", "patch", "list", "--json"], cwd=work,
                            capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert {d["id"]: d["origin"] for d in json.loads(listed.stdout)} == {
        "sm120-flashinfer-allreduce-fusion": "shipped", "sm103-ep-cuda-graph-guard": "shipped"}
