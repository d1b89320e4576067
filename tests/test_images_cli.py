"""``forgepatch build`` / ``forgepatch bake`` through the CLI: exit codes, messages, and the
whole pipeline (patch engine -> context -> image) for sm120 and sm103."""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
import uuid
from pathlib import Path

import pytest
import tomlkit

from forgepatch.cli import main
from forgepatch.images.bake import validate
from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
from images_support import containers_from, log_image_ids, remove_intermediates, run_in


def _matrix(tmp_path: Path, base_image: str, repo: str, wheels: dict | None = None, **arch_patches) -> Path:
    path = tmp_path / "matrix.toml"
    doc = {
        "default_pin": "v0_5_23",
        "pins": {"v0_5_23": {"pypi": "0.5.23"}},
        "arches": {a: {"patches": p, "base_image": base_image, "extra_wheels": (wheels or {}).get(a, [])}
                   for a, p in arch_patches.items()},
        "smoke": {"image_repo": repo},
    }
    path.write_text(tomlkit.dumps(doc))
    return path


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _temp_leftovers() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("forgepatch-")}


@pytest.fixture()
def bad_input_env(tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    config = _matrix(tmp_path, "forgepatch-test/base:bookworm", "forgepatch-test/cli", sm120=[], sm103=[])
    before = _temp_leftovers()
    yield ["--config", str(config), "--patches", str(patches)]
    assert _temp_leftovers() == before, "temp dirs left behind"


def _one_line_error(rc, err, code, *needles):
    assert rc == code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forgepatch: error"), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_unknown_arch_is_bad_input(capsys, bad_input_env):
    rc, out, err = _run(capsys, *bad_input_env, "build", "--arch", "sm999")
    _one_line_error(rc, err, 2, "unknown arch 'sm999'")
    rc, out, err = _run(capsys, *bad_input_env, "build", "--arch", "sm90")
    _one_line_error(rc, err, 2, "not configured")


def test_unreachable_engine_says_how_to_start_it(capsys, bad_input_env, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    rc, out, err = _run(capsys, *bad_input_env, "build", "--arch", "sm120")
    _one_line_error(rc, err, 2, "cannot reach the Docker engine", "start it", "DOCKER_HOST")


@pytest.mark.docker
def test_missing_base_image_is_bad_input(capsys, bad_input_env, docker_client):
    rc, out, err = _run(capsys, *bad_input_env, "build", "--arch", "sm120", "--base-image", "forgepatch-test/absent:nope")
    _one_line_error(rc, err, 2, "forgepatch-test/absent:nope", "docker pull")


@pytest.mark.docker
def test_unwritable_context_dir_is_bad_input(capsys, bad_input_env, base_image, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, out, err = _run(capsys, *bad_input_env, "build", "--arch", "sm120", "--context-dir", str(blocker / "ctx"))
    _one_line_error(rc, err, 2, "cannot write the build context")
    assert blocker.read_text() == ""


# -- the whole pipeline through the patch engine ---------------------------------------------


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory, base_image, docker_client):
    """A matrix with the shipped patch series of sm120 and sm103, on the local base image."""
    shipped = tomllib.loads(SHIPPED_MATRIX.read_text())
    tmp = tmp_path_factory.mktemp("cli")
    repo = f"forgepatch-test/cli-{uuid.uuid4().hex[:8]}"
    config = _matrix(tmp, base_image, repo, **{a: shipped["arches"][a]["patches"] for a in ("sm120", "sm103")})
    yield ["--config", str(config), "--patches", str(SHIPPED_PATCHES)], tmp, repo
    for image in docker_client.api.images(name=repo):
        docker_client.api.remove_image(image["Id"], force=True)


@pytest.mark.docker
def test_build_patches_sm120_and_leaves_sm103_unpatched(capsys, engine_env, docker_client):
    from forgepatch.config import load_matrix
    from forgepatch.sources import resolve_source

    argv, tmp, repo = engine_env
    docs = {}
    for arch in ("sm120", "sm103"):
        rc, out, err = _run(capsys, *argv, "build", "--arch", arch, "--context-dir", str(tmp / arch), "--json")
        assert rc == 0, err
        docs[arch] = json.loads(out)
        assert docs[arch]["tag"].startswith(f"{repo}:v0_5_23-{arch}-") and not docs[arch]["cache_hit"]
        assert docs[arch]["labels"]["forgepatch.patchset"]

    pristine = Path(resolve_source(None, load_matrix(Path(argv[1]))).package)
    sm120_files = docs["sm120"]["apply"]["changed_files"]
    sm103_files = set(docs["sm103"]["apply"]["changed_files"])
    assert sm120_files, "the sm120 series changed nothing"
    for rel in sm120_files:
        in_120 = run_in(docker_client, docs["sm120"]["tag"], f"cat /opt/forgepatch/sglang/{rel}")
        assert in_120 == (tmp / "sm120" / "overlay" / "sglang" / rel).read_text()
        assert in_120 != (pristine / rel).read_text()
        if rel not in sm103_files:
            in_103 = run_in(docker_client, docs["sm103"]["tag"], f"cat /opt/forgepatch/sglang/{rel}")
            assert in_103 == (pristine / rel).read_text(), f"{rel} is patched in the sm103 image"
    gate = run_in(docker_client, docs["sm120"]["tag"], "grep -rl 'sm120\\|sm_120\\|is_sm12' /opt/forgepatch/sglang/srt/layers | head -1")
    assert gate.strip(), "no sm120 gate in the sm120 image's sglang"

    rc, out, err = _run(capsys, *argv, "build", "--arch", "sm120", "--context-dir", str(tmp / "sm120"), "--json")
    again = json.loads(out)
    assert rc == 0 and again["cache_hit"] and again["image_id"] == docs["sm120"]["image_id"]

    # bake describes the same images (same content-hash tags) for BuildKit builders
    bake_file = tmp / "docker-bake.json"
    rc, out, err = _run(capsys, *argv, "bake", "--out", str(bake_file), "--arch", "sm120", "--arch", "sm103")
    assert rc == 0, err
    doc = json.loads(bake_file.read_text())
    assert validate(doc, tmp) == []
    assert {t["tags"][0] for t in doc["target"].values()} == {docs["sm120"]["tag"], docs["sm103"]["tag"]}


@pytest.mark.docker
def test_failed_build_exits_1_with_the_step_and_log_tail(capsys, tmp_path, base_image, docker_client):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "broken_kernels-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    repo = f"forgepatch-test/cli-{uuid.uuid4().hex[:8]}"
    config = _matrix(tmp_path, base_image, repo, wheels={"sm120": ["wheels/broken_kernels-1.0-py3-none-any.whl"]}, sm120=[])
    (tmp_path / "patches").mkdir()
    argv = ["--config", str(config), "--patches", str(tmp_path / "patches")]
    rc, out, err = _run(capsys, *argv, "build", "--arch", "sm120", "--context-dir", str(tmp_path / "ctx"), "--force")
    assert rc == 1 and out == ""
    assert "Traceback" not in err
    tail = [line for line in err.splitlines() if line.startswith("  | ")]
    final = err.strip().splitlines()[-1]
    assert tail, err
    assert final.startswith("forgepatch: error: image build for sm120 failed at step") and "pip install --no-index" in final
    log_text = (tmp_path / "ctx.log").read_text()
    assert containers_from(docker_client, log_image_ids(log_text)) == []
    remove_intermediates(docker_client, log_text, keep=base_image)
