"""`build` overlays THE wheel of the pin that the base image installs: its CPython, machine and
glibc pick the wheel among the pin's per-platform wheels (real SGLang 0.5.23: cp311/cp312 x
x86_64/aarch64, each with compiled `.so` files), its bytes are checked against the digest the
pin records for that tag, and its complete package (`.so`, configs, data) goes into the image
with the series' patched `.py` files on top. The wheels' digests are computed here from bytes
`pip download --python-version --platform` fetched, not by forgepatch."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from support.cli import assert_one_line_error, forgepatch

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.5.23"
X86_311, X86_312 = "cp311-manylinux_2_34_x86_64", "cp312-manylinux_2_34_x86_64"
ARM_311, ARM_312 = "cp311-manylinux_2_34_aarch64", "cp312-manylinux_2_34_aarch64"
MATRIX = """\
default_pin = "p23"

[pins.p23]
pypi = "{version}"
[pins.p23.wheels]
{wheels}

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "{base}"
profiles = ["ok"]

[profiles.ok]
kind = "command"
command = "true"
gpus = 0

[smoke]
image_repo = "{repo}"
"""


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """tag -> a wheel of sglang 0.5.23 fetched by pip here (pip's own cache makes it cheap)."""
    out = {}
    for tag, python, platform in ((X86_311, "3.11", "manylinux_2_34_x86_64"), (X86_312, "3.12", "manylinux_2_34_x86_64"),
                                  (ARM_311, "3.11", "manylinux_2_34_aarch64"), (ARM_312, "3.12", "manylinux_2_34_aarch64")):
        into = tmp_path_factory.mktemp(tag)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", python, "--platform", platform, "-d", str(into), f"sglang=={VERSION}"],
                       check=True, capture_output=True)
        out[tag] = next(into.glob("sglang-*.whl"))
    return out


def write_matrix(directory: Path, wheels: dict[str, str], base: str, repo: str = "forgepatch-test/unused") -> Path:
    table = "\n".join(f'{tag} = "{digest}"' for tag, digest in sorted(wheels.items()))
    path = directory / "matrix.toml"
    path.write_text(MATRIX.format(version=VERSION, wheels=table, base=base, repo=repo))
    return path


def digests(wheels: dict[str, Path]) -> dict[str, str]:
    return {tag: sha(path.read_bytes()) for tag, path in wheels.items()}


# -- the wheel a base installs ------------------------------------------------------------


def test_the_pins_wheel_for_the_bases_python_and_machine_is_chosen_and_checked(wheels, tmp_path):
    """Not this host's wheel: the one of the base's CPython and machine (an aarch64 3.12 base
    takes the cp312 aarch64 wheel), its bytes checked against the pin's record for that tag."""
    from forgepatch.config import load_matrix
    from forgepatch.errors import BadInput
    from forgepatch.wheels import base_wheel

    pin = load_matrix(write_matrix(tmp_path, digests(wheels), "example.invalid/base")).pins["p23"]
    for python, machine, want in (("3.12", "aarch64", ARM_312), ("3.11", "aarch64", ARM_311),
                                  ("3.12", "x86_64", X86_312), ("3.11", "x86_64", X86_311)):
        tag, wheel, digest = base_wheel("p23", pin, python, machine, "2.39", "b")
        assert tag == want and digest == sha(wheels[want].read_bytes()) == sha(wheel.read_bytes())
    with pytest.raises(BadInput) as exc:  # an older glibc than the wheels' manylinux_2_34
        base_wheel("p23", pin, "3.12", "aarch64", "2.31", "old-glibc")
    assert "base image old-glibc is cp312-aarch64 (glibc 2.31)" in str(exc.value) and ARM_312 in str(exc.value)

    swapped = digests(wheels)  # the pin records the x86_64 wheel's digest for the aarch64 tag
    swapped[ARM_312] = swapped[X86_312]
    pin = load_matrix(write_matrix(tmp_path, swapped, "example.invalid/base")).pins["p23"]
    with pytest.raises(BadInput) as exc:
        base_wheel("p23", pin, "3.12", "aarch64", "2.39", "spark-base")
    text = str(exc.value)
    assert f"pins.p23.wheels.{ARM_312}" in text and swapped[X86_312] in text and sha(wheels[ARM_312].read_bytes()) in text


def test_an_image_of_any_wheel_of_the_pin_is_the_pins_code(wheels, tmp_path):
    """The pin's sha256 is the wheel of the host that recorded it; an image built on an ARM64
    base carries the aarch64 wheel's digest as its upstream revision, and release/smoke hold it
    to the pin through ``Upstream.of_pin``: every wheel the pin records is the pin's code, a
    wheel it does not record is not."""
    from forgepatch.combination import Upstream
    from forgepatch.config import load_matrix

    recorded = digests(wheels)
    path = write_matrix(tmp_path, recorded, "example.invalid/base")
    path.write_text(path.read_text().replace('pypi = "0.5.23"\n', f'pypi = "0.5.23"\nsha256 = "{recorded[X86_311]}"\n', 1))
    want = Upstream.of_pin(load_matrix(path).pins["p23"])
    for tag in (ARM_312, X86_311, X86_312):
        assert Upstream("pypi", VERSION, recorded[tag]).mismatch(want) is None
    assert Upstream("pypi", VERSION, "0" * 64).mismatch(want) == "a different wheel of that version"
    assert Upstream("pypi", "0.5.22", recorded[ARM_312]).mismatch(want) == "a different version"


TAGS = [X86_311, X86_312, ARM_311, ARM_312, "cp311-manylinux2014_x86_64", "cp312-musllinux_1_2_aarch64",
        "py3-any", "cp310-manylinux_2_17_aarch64", "cp313-manylinux_2_28_x86_64", "cp311-linux_aarch64"]


@given(tags=st.sets(st.sampled_from(TAGS)), python=st.sampled_from(["3.10", "3.11", "3.12", "3.13"]),
       machine=st.sampled_from(["x86_64", "aarch64"]), glibc=st.sampled_from([None, "2.17", "2.31", "2.36", "2.39"]))
def test_the_chosen_tag_is_one_the_base_can_install(tags, python, machine, glibc):
    """Whatever the pin has, the choice is installable by the base (its CPython or pure, its
    machine, a glibc it has; never musl), a CPython wheel beats a pure one, and nothing is
    chosen only when no tag fits."""
    from forgepatch.wheels import choose_tag

    cp = "cp" + python.replace(".", "")
    have = tuple(int(x) for x in glibc.split(".")) if glibc else None

    def installable(tag: str) -> bool:
        py, plat = tag.split("-", 1)
        if py not in (cp, "py3"):
            return False
        if plat == "any":
            return True
        if not plat.endswith("_" + machine) or plat.startswith("musllinux") or have is None:
            return False
        stem = plat[: -len(machine) - 1]
        need = {"manylinux2014": (2, 17), "linux": (0,)}.get(stem) or tuple(int(x) for x in stem.split("_")[1:3])
        return have >= need

    chosen = choose_tag(tags, python, machine, glibc)
    fitting = {t for t in tags if installable(t)}
    assert (chosen is None) == (not fitting)
    if chosen is not None:
        assert chosen in fitting
        if any(t.startswith(cp + "-") for t in fitting):
            assert chosen.startswith(cp + "-")


# -- the image ----------------------------------------------------------------------------

LIST = ("import hashlib, json, os\n"
        "root = open('/opt/forgepatch/sglang-target').read().strip()\n"
        "out = {}\n"
        "for d, dirs, files in os.walk(root):\n"
        "    dirs[:] = [x for x in dirs if x != '__pycache__']\n"
        "    for f in files:\n"
        "        p = os.path.join(d, f)\n"
        "        out[os.path.relpath(p, root)] = hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
        "print(json.dumps(out))\n")


@pytest.mark.docker
def test_the_image_carries_the_matching_wheels_complete_package_with_the_patches_on_top(
        wheels, tmp_path, base_image, docker_client):
    repo = f"forgepatch-test/wheel-{uuid.uuid4().hex[:8]}"
    write_matrix(tmp_path, digests(wheels), base_image, repo)
    try:
        r = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--context-dir", tmp_path / "ctx", "--json",
                       cwd=tmp_path, env=env())
        assert r.rc == 0, r.err
        doc = r.json()
        out = docker_client.containers.run(doc["image_id"], ["python3", "-c", LIST], network_mode="none", remove=True)
        image = json.loads(out.decode())
    finally:
        for img in docker_client.api.images(name=repo):
            docker_client.api.remove_image(img["Id"], force=True)
    # the base is CPython 3.11 on x86_64: the cp311 x86_64 wheel, as the labels say
    wheel = wheels[X86_311]
    assert doc["labels"]["org.opencontainers.image.revision"] == sha(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as zf:
        members = {i.filename[len("sglang/"):]: sha(zf.read(i)) for i in zf.infolist()
                   if i.filename.startswith("sglang/") and not i.is_dir()}
    assert set(image) == set(members)  # every file of the wheel's package, nothing else
    so = sorted(rel for rel in members if rel.endswith(".so"))
    assert so and all("cpython-311-x86_64" in rel for rel in so)
    assert {rel: image[rel] for rel in so} == {rel: members[rel] for rel in so}  # the wheel's compiled bytes
    non_py = [rel for rel in members if not rel.endswith(".py")]
    assert all(image[rel] == members[rel] for rel in non_py)  # configs, kernels' sources, data: the wheel's

    # the .py files: the series' output (`apply --out`), which differs from the wheel where it patched
    a = forgepatch("apply", "--arch", "sm120", "--pin", "p23", "--out", tmp_path / "patched", cwd=tmp_path, env=env())
    assert a.rc == 0, a.err
    patched = tmp_path / "patched" / "sglang"
    py = [rel for rel in members if rel.endswith(".py")]
    assert all(image[rel] == sha((patched / rel).read_bytes()) for rel in py)
    changed = [rel for rel in py if image[rel] != members[rel]]
    assert changed  # the series changed files, and the image has them changed


@pytest.mark.docker
def test_a_base_no_wheel_of_the_pin_fits_is_refused_naming_both_tags(wheels, tmp_path, base_image, docker_client):
    """The test base is CPython 3.11 on x86_64: a pin with only cp312 and aarch64 wheels has
    none for it (exit 2, one line, before anything is built); the x86_64 3.11 tag carrying
    another wheel's digest is refused with both digests."""
    repo = f"forgepatch-test/wheel-none-{uuid.uuid4().hex[:8]}"
    recorded = digests(wheels)
    write_matrix(tmp_path, {t: d for t, d in recorded.items() if t != X86_311}, base_image, repo)
    r = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--context-dir", tmp_path / "ctx", cwd=tmp_path, env=env())
    assert_one_line_error(r, 2, f"base image {base_image} is cp311-x86_64 (glibc ", "pin p23 (SGLang 0.5.23) has no wheel",
                          f"{ARM_311}, {ARM_312}, {X86_312}")
    swapped = dict(recorded, **{X86_311: recorded[X86_312]})
    write_matrix(tmp_path, swapped, base_image, repo)
    r = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--context-dir", tmp_path / "ctx", cwd=tmp_path, env=env())
    assert_one_line_error(r, 2, f"pins.p23.wheels.{X86_311}", recorded[X86_312], recorded[X86_311], "not the pinned wheel")
    assert docker_client.api.images(name=repo) == []  # nothing was built


# -- --platform linux/arm64 ---------------------------------------------------------------
# No arm64 root file system can be had offline here and the engine has no emulation (binfmt),
# so the arm64 base is a STAND-IN: an image whose config says linux/arm64 and whose files are
# what an Ubuntu arm64 image with CPython 3.12 and SGLang installed has where the facts reader
# looks (python3 -> python3.12 on PATH, libc.so.6 of glibc 2.39, a dist-info). Nothing in it runs.


def _tar(files: dict[str, bytes | str]) -> bytes:
    """A layer: str values are symlink targets, bytes are file contents."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted({"/".join(n.split("/")[:i]) for n in files for i in range(1, n.count("/") + 1)}):
            if name not in files:
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
        for name, value in sorted(files.items()):
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size, info.mode = len(value), 0o755
                tar.addfile(info, io.BytesIO(value))
    return buf.getvalue()


def load_image(client, tag: str, files: dict[str, bytes | str], architecture: str) -> str:
    """``docker load`` a one-layer image of ``files`` whose config says linux/``architecture``."""
    import io
    import tarfile

    layer = _tar(files)
    config = json.dumps({"architecture": architecture, "os": "linux", "config": {"Env": [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(layer)]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("config.json", config), ("layer/layer.tar", layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    client.api.load_image(buf.getvalue())
    return client.api.inspect_image(tag)["Id"]


def arm64_files(sglang: str) -> dict[str, bytes | str]:
    site = "usr/local/lib/python3.12/dist-packages"
    return {"bin": "usr/bin", "usr/bin/python3": "python3.12", "usr/bin/python3.12": b"\x7fELF (not run)",
            "usr/lib/aarch64-linux-gnu/libc.so.6": b"\x7fELF...GNU C Library (Ubuntu GLIBC 2.39-0ubuntu8.4) stable "
                                                   b"release version 2.39.\nCopyright",
            f"{site}/sglang-{sglang}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {sglang}\n".encode(),
            f"{site}/sglang/__init__.py": b"", "usr/lib/python3/dist-packages/pip/__init__.py": b""}


@pytest.fixture
def arm64_base(docker_client):
    made = []

    def make(sglang: str) -> str:
        tag = f"forgepatch-test/arm64-stand-in:{uuid.uuid4().hex[:8]}"
        made.append(load_image(docker_client, tag, arm64_files(sglang), "arm64"))
        return tag

    yield make
    for image_id in made:
        docker_client.api.remove_image(image_id, force=True)


@pytest.mark.docker
def test_base_facts_read_from_files_agree_with_python_run_in_the_base(base_image, docker_client):
    """The reader used for a base of another platform, on the real test base (x86_64, where
    its python3 can run): the same facts as importlib in a container of it."""
    from forgepatch.images.base_facts import SCRIPT, BaseFacts, read_files

    probe = [["sglang", "sglang", "sglang"], ["pip", "pip", "pip"], ["setuptools", "setuptools", "setuptools"],
             ["wheel", "wheel", "wheel"]]
    api = docker_client.api
    image_id = api.inspect_image(base_image)["Id"]
    from_files = read_files(api, base_image, image_id, "x86_64", probe)
    ran = docker_client.containers.run(image_id, ["python3", "-c", SCRIPT, json.dumps(probe)], entrypoint=[],
                                       network_mode="none", remove=True)
    assert from_files == BaseFacts.from_json(json.loads(ran.decode().splitlines()[-1]))
    assert from_files.packages["pip"].version and from_files.glibc and from_files.python.startswith("3.")


@pytest.mark.docker
def test_build_for_arm64_takes_the_aarch64_wheel_and_reaches_the_engine_for_that_platform(
        wheels, tmp_path, base_image, docker_client, arm64_base):
    from forgepatch.images.base_facts import read_base

    spark = arm64_base("0.5.23")
    api = docker_client.api
    facts = read_base(api, spark, api.inspect_image(spark)["Id"])  # nothing of it runs here
    assert (facts.python, facts.machine, facts.glibc, facts.sglang) == ("3.12", "aarch64", "2.39", "0.5.23")

    repo = f"forgepatch-test/wheel-arm-{uuid.uuid4().hex[:8]}"
    write_matrix(tmp_path, digests(wheels), spark, repo)
    bad = forgepatch("build", "--arch", "sm121", "--pin", "p23", "--platform", "linux/sparc", cwd=tmp_path, env=env())
    assert_one_line_error(bad, 2, "--platform: 'linux/sparc'", "linux/amd64, linux/arm64")
    other = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--platform", "linux/amd64", cwd=tmp_path, env=env())
    assert_one_line_error(other, 2, f"base image {spark} is linux/arm64, --platform is linux/amd64")
    x86 = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--platform", "linux/arm64", "--base-image", base_image,
                     cwd=tmp_path, env=env())
    assert_one_line_error(x86, 2, f"base image {base_image} is linux/amd64, --platform is linux/arm64")

    r = forgepatch("build", "--arch", "sm120", "--pin", "p23", "--platform", "linux/arm64", "--context-dir",
                   tmp_path / "ctx", "--record", tmp_path / "builds.json", "--json", cwd=tmp_path, env=env())
    log = (tmp_path / "ctx.log").read_text() if (tmp_path / "ctx.log").exists() else ""
    assert r.rc == 0, r.err
    doc = r.json()
    try:  # the image's files, read without running it (nothing arm64 runs here)
        inspect = api.inspect_image(doc["image_id"])
        container = api.create_container(doc["image_id"], command=["/nonexistent"])
        try:
            chunks, _ = api.get_archive(container, "/usr/local/lib/python3.12/dist-packages/sglang")
            image_tar = b"".join(chunks)
            pth, _ = api.get_archive(container, "/usr/local/lib/python3.12/dist-packages/forgepatch-inimage.pth")
            pth = b"".join(pth)
        finally:
            api.remove_container(container, force=True)
    finally:
        for img in api.images(name=repo):
            api.remove_image(img["Id"], force=True)
    assert (inspect["Os"], inspect["Architecture"]) == ("linux", "arm64") and doc["platform"] == "linux/arm64"
    assert json.loads((tmp_path / "builds.json").read_text())["builds"][0]["platform"] == "linux/arm64"
    assert doc["labels"]["org.opencontainers.image.revision"] == sha(wheels[ARM_312].read_bytes())
    assert doc["steps"] and not any(s["instruction"].startswith("RUN") for s in doc["steps"])
    # the context carries the cp312 aarch64 wheel's complete package: its .so bytes
    import tarfile

    with tarfile.open(tmp_path / "ctx" / "upstream" / "sglang.tar.gz") as tar:
        packed = {m.name[len("sglang/"):]: sha(tar.extractfile(m).read()) for m in tar if m.isfile()}
    with zipfile.ZipFile(wheels[ARM_312]) as zf:
        members = {i.filename[len("sglang/"):]: sha(zf.read(i)) for i in zf.infolist()
                   if i.filename.startswith("sglang/") and not i.is_dir()}
    so = [rel for rel in members if rel.endswith(".so")]
    assert so and all("cpython-312-aarch64" in rel for rel in so)
    assert packed == members
    # in the image: the wheel's package where the base's python3 imports sglang from, the
    # series' changed files on top (the context's overlay), and the in-image package's .pth
    import io

    with tarfile.open(fileobj=io.BytesIO(image_tar)) as tar:
        got = {m.name[len("sglang/"):]: sha(tar.extractfile(m).read()) for m in tar if m.isfile()}
    overlay = tmp_path / "ctx" / "overlay" / "sglang"
    changed = {p.relative_to(overlay).as_posix(): sha(p.read_bytes()) for p in overlay.rglob("*") if p.is_file()}
    assert changed and set(got) == set(members) | {"__init__.py"}
    assert {rel: got[rel] for rel in so} == {rel: members[rel] for rel in so}
    assert all(got[rel] == (changed[rel] if rel in changed else members[rel]) for rel in members)
    assert all(changed[rel] != members[rel] for rel in changed)
    assert b"/opt/forgepatch/inimage/python" in pth


@pytest.mark.docker
def test_bake_for_arm64_reads_the_local_base_and_names_the_platform(wheels, tmp_path, base_image, arm64_base):
    """bake --platform: every target gets `platforms`; a base of the engine is read as build
    reads it (its wheel), one of the other platform is refused, one the engine lacks is said."""
    from forgepatch.images.bake import validate

    spark = arm64_base("0.5.23")
    write_matrix(tmp_path, digests(wheels), spark)
    r = forgepatch("bake", "--platform", "linux/arm64/v8", "--out", tmp_path / "bake.json", "--arch", "sm120",
                   cwd=tmp_path, env=env())
    assert r.rc == 0 and "warning" not in r.err, r.err
    doc = json.loads((tmp_path / "bake.json").read_text())
    (target,) = doc["target"].values()
    assert target["platforms"] == ["linux/arm64"] and validate(doc, tmp_path) == []
    assert target["labels"]["org.opencontainers.image.revision"] == sha(wheels[ARM_312].read_bytes())

    write_matrix(tmp_path, digests(wheels), base_image)
    other = forgepatch("bake", "--platform", "linux/arm64", "--out", tmp_path / "b2.json", "--arch", "sm120",
                       cwd=tmp_path, env=env())
    assert_one_line_error(other, 2, f"base image {base_image} is linux/amd64, --platform is linux/arm64")
    write_matrix(tmp_path, digests(wheels), "example.invalid/not-here:1")
    gone = forgepatch("bake", "--out", tmp_path / "b3.json", "--arch", "sm120", cwd=tmp_path, env=env())
    assert gone.rc == 0 and "base image example.invalid/not-here:1 is not in the local Docker engine" in gone.err
