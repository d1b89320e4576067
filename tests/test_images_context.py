"""Build context, image spec and bake file: determinism, layer split, secrets (no engine)."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from forgepatch.arch import get_arch
from forgepatch.errors import BadInput
from forgepatch.images.bake import bake_document, validate, write_bake
from forgepatch.combination import LABEL_ARG, Upstream
from forgepatch.images.context import FIXED_MTIME, IMAGE_PREFIX, MANIFEST, UPSTREAM_TAR, assemble, image_files
from forgepatch.images.spec import ImageSpec, SourceFacts
from forgepatch.paths import IMAGE_INSTALLER, PACKAGE_DIR, SHIPPED_DOCKERFILE
from support.imagecheck import image_import_problems
from images_support import linked_copy, make_wheel, release_tree, rewrite

CHANGED = "srt/layers/flashinfer_comm_fusion.py"


@pytest.fixture(scope="module")
def pristine() -> Path:
    return release_tree()


@pytest.fixture()
def patched(pristine, tmp_path) -> Path:
    tree = linked_copy(pristine, tmp_path / "patched" / "sglang")
    rewrite(tree / CHANGED, (pristine / CHANGED).read_text() + "\n# forgepatch test edit\n")
    return tree


_TAR_CACHE: list[Path] = []


@pytest.fixture(autouse=True, scope="module")
def _shared_tar_cache(tmp_path_factory):
    """Pack (gzip) each upstream tree once per module, as the CLI does across runs."""
    _TAR_CACHE[:] = [tmp_path_factory.mktemp("upstream-tars")]
    yield


def _assemble(dest, package, upstream=None, **kw):
    kw.setdefault("tar_cache", _TAR_CACHE[0])
    return assemble(dest, package=package, upstream=upstream, dockerfile=SHIPPED_DOCKERFILE,
                    installer=IMAGE_INSTALLER, package_dir=PACKAGE_DIR, **kw)


def _tar_bytes(ctx) -> bytes:
    buf = io.BytesIO()
    ctx.write_tar(buf)
    return buf.getvalue()


def test_context_is_deterministic_and_splits_upstream_from_overlay(pristine, patched, tmp_path):
    a = _assemble(tmp_path / "a", patched, pristine)
    b = _assemble(tmp_path / "b", patched, pristine, tar_cache=None)  # packs the tree itself
    assert a.digest == b.digest
    assert _tar_bytes(a) == _tar_bytes(b)
    assert a.overlay_files == [CHANGED] and a.removed_files == []
    paths = [e.path for e in a.entries]
    assert paths == sorted(paths)
    assert {"Dockerfile", "inimage/install.py", "inimage/python/forgepatch/arch.py", UPSTREAM_TAR,
            f"overlay/sglang/{CHANGED}", "upstream/removed.txt", "wheels"} <= set(paths)
    assert not any(p.endswith((".pyc", MANIFEST)) or "__pycache__" in p for p in paths)

    with tarfile.open(fileobj=io.BytesIO(_tar_bytes(a))) as tar:
        members = tar.getmembers()
        assert all(m.mtime == FIXED_MTIME and m.uid == 0 and m.gid == 0 for m in members)
        inner = tarfile.open(fileobj=tar.extractfile(UPSTREAM_TAR))
        names = {m.name.removeprefix("sglang/") for m in inner.getmembers() if m.isfile()}
        assert names == {p.relative_to(pristine).as_posix() for p in pristine.rglob("*.py")}
        unpatched = inner.extractfile(f"sglang/{CHANGED}").read()
        assert unpatched == (pristine / CHANGED).read_bytes()
    assert all(int(p.stat().st_mtime) == FIXED_MTIME for p in (tmp_path / "a").rglob("*") if p.name != MANIFEST)


def test_one_file_change_touches_only_the_overlay(pristine, patched, tmp_path):
    dest = tmp_path / "ctx"
    first = _assemble(dest, patched, pristine)
    again = _assemble(dest, patched, pristine)
    assert again.digest == first.digest and again.files_written == 0

    rewrite(patched / CHANGED, (patched / CHANGED).read_text() + "# second edit\n")
    second = _assemble(dest, patched, pristine)
    assert second.digest != first.digest
    changed = {e.path for e in set(second.entries) ^ set(first.entries)}
    assert changed == {f"overlay/sglang/{CHANGED}"}
    assert second.files_written == 1


def test_removed_and_new_files_are_tracked(pristine, patched, tmp_path):
    (patched / "srt" / "forgepatch_new.py").write_text("X = 1\n")
    (patched / "srt" / "utils" / "patch_torch.py").unlink()
    ctx = _assemble(tmp_path / "ctx", patched, pristine)
    assert "srt/forgepatch_new.py" in ctx.overlay_files
    assert ctx.removed_files == ["srt/utils/patch_torch.py"]
    assert (tmp_path / "ctx/upstream/removed.txt").read_text() == "srt/utils/patch_torch.py\n"


def test_without_upstream_the_whole_tree_is_one_layer(patched, tmp_path):
    ctx = _assemble(tmp_path / "ctx", patched)
    assert ctx.overlay_files == []
    inner = tarfile.open(tmp_path / "ctx" / UPSTREAM_TAR)
    assert inner.extractfile(f"sglang/{CHANGED}").read() == (patched / CHANGED).read_bytes()


def test_stale_files_are_removed_and_foreign_dirs_refused(pristine, patched, tmp_path):
    dest = tmp_path / "ctx"
    _assemble(dest, patched, pristine)
    (dest / "overlay" / "sglang" / "stale.py").write_text("x")
    _assemble(dest, patched, pristine)
    assert not (dest / "overlay" / "sglang" / "stale.py").exists()

    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match="not a forgepatch context"):
        _assemble(foreign, patched, pristine)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_unwritable_context_dir_is_bad_input_and_leaves_nothing(pristine, patched, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BadInput, match="cannot write the build context"):
        _assemble(blocker / "ctx", patched, pristine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "patched"]


def test_image_carries_the_whole_inimage_package_and_nothing_heavier(pristine, patched, tmp_path):
    files = image_files(PACKAGE_DIR)
    inimage = sorted(p.relative_to(PACKAGE_DIR).as_posix() for p in (PACKAGE_DIR / "inimage").glob("*.py"))
    assert set(inimage) <= set(files) and {"__init__.py", "arch.py", "errors.py"} <= set(files)
    assert not [f for f in files if not f.startswith("inimage/") and f not in ("__init__.py", "arch.py", "errors.py")]
    # every module the image's files import is in the image, or stdlib / torch (never typer, libcst, ...)
    assert image_import_problems(PACKAGE_DIR, files) == []
    ctx = _assemble(tmp_path / "ctx", patched, pristine)
    shipped = {e.path.removeprefix(IMAGE_PREFIX + "/") for e in ctx.entries if e.path.startswith(IMAGE_PREFIX + "/") and not e.is_dir}
    assert shipped == set(files) == set(ctx.image_modules)


def test_import_check_catches_a_module_left_out(tmp_path):
    files = [f for f in image_files(PACKAGE_DIR) if f != "inimage/signatures.py"]
    assert any("forgepatch.inimage.signatures" in p for p in image_import_problems(PACKAGE_DIR, files))


def test_planted_token_in_a_package_file_is_refused(pristine, patched, tmp_path):
    token = "hf_plantedTOKENvalue1234567890"
    rewrite(patched / "version.py", f'__version__ = "x"\nKEY = "{token}"\n')
    with pytest.raises(BadInput, match=r"\$HF_TOKEN") as err:
        _assemble(tmp_path / "ctx", patched, pristine, secrets={"HF_TOKEN": token})
    assert token not in str(err.value)


def _spec(ctx, arch="sm120", **kw) -> ImageSpec:
    return ImageSpec(get_arch(arch), "v0_5_23", "forgepatch-test/sglang", "forgepatch-test/base:bookworm", ctx,
                     SourceFacts(Upstream("pypi", "0.5.23", "0" * 64)), **kw)


def test_spec_args_labels_and_tag(pristine, patched, tmp_path, monkeypatch):
    ctx = _assemble(tmp_path / "ctx", patched, pristine)
    s120, s103 = _spec(ctx, "sm120", patchset="p1"), _spec(ctx, "sm103")
    assert s120.build_args()["TORCH_CUDA_ARCH_LIST"] == "12.0a"
    assert s103.build_args()["TORCH_CUDA_ARCH_LIST"] == "10.3a"
    assert s120.build_args()["BASE_IMAGE"] == "forgepatch-test/base:bookworm"
    assert re.fullmatch(r"forgepatch-test/sglang:v0_5_23-sm120-[0-9a-f]{12}", s120.tag)
    assert s120.content_hash != s103.content_hash
    assert s120.content_hash != _spec(ctx, "sm120", patchset="p2").content_hash
    labels = s120.labels("sha256:" + "1" * 64)
    assert labels["forgepatch.arch"] == "sm120" and labels["forgepatch.patchset"] == "p1"
    assert labels["forgepatch.context-hash"] == s120.content_hash
    assert labels["org.opencontainers.image.revision"] == "0" * 64
    assert labels["forgepatch.upstream"] == "pypi:0.5.23" and labels["org.opencontainers.image.version"] == "0.5.23"
    assert Upstream.from_labels(labels) == Upstream("pypi", "0.5.23", "0" * 64)
    args = s120.engine_args(labels)
    assert all(args[arg] == labels.get(label, "") for label, arg in LABEL_ARG.items())

    monkeypatch.setenv("HF_TOKEN", "hf_plantedTOKENvalue1234567890")
    with pytest.raises(BadInput, match="looks like a secret"):
        _spec(ctx, extra_args={"HF_TOKEN": "x"})
    with pytest.raises(BadInput, match=r"carries the value of \$HF_TOKEN"):
        _spec(ctx, extra_args={"EXTRA": "hf_plantedTOKENvalue1234567890"})


def test_dockerfile_reads_every_arch_arg_and_label():
    text = SHIPPED_DOCKERFILE.read_text()
    declared = {name for line in re.findall(r"^ARG (.+?)(?<!\\)$", text.replace("\\\n", " "), re.M)
                for name in re.findall(r"([A-Z_]+)(?:=\S*)?", line)}
    assert set(get_arch("sm120").build_args()) | {"BASE_IMAGE"} <= declared
    assert set(LABEL_ARG.values()) <= declared
    labelled = dict(re.findall(r"([a-z][a-z0-9.-]+)=\"\$\{(\w+)\}\"", text))
    assert labelled == LABEL_ARG  # the label table, label for label, arg for arg
    steps = ("COPY wheels/", "COPY inimage/", "COPY upstream/", "COPY overlay-packages/", "COPY overlay/sglang/", "LABEL ")
    for step in steps:
        assert step in text
    order = [text.index(s) for s in steps]
    assert order == sorted(order), "layer order: wheels < in-image code < upstream < overlays < labels"


def test_other_packages_get_their_upstream_tar_and_overlay(pristine, patched, tmp_path):
    """A series that patches FlashInfer too: its unpatched package as its own tar (real 0.6.1
    wheel), only the files the series changed in its overlay, listed in upstream/packages.txt."""
    from forgepatch.images.context import OtherPackage
    from forgepatch.packages import KNOWN
    from forgepatch.sources import pypi_tree

    fi = Path(pypi_tree("0.6.1", KNOWN["flashinfer"]).package)
    comm = (fi / "jit/comm.py").read_text()
    changes = {"jit/comm.py": comm.replace("supported_major_versions=[9, 10]", "supported_major_versions=[9, 10, 12]"),
               "jit/core.py": (fi / "jit/core.py").read_bytes(),  # the same bytes as upstream: no overlay
               "data/csrc/new.cu": b"// added\n"}
    ctx = _assemble(tmp_path / "ctx", patched, pristine, others=[OtherPackage("flashinfer", fi, changes)])
    assert ctx.package_overlays == {"flashinfer": ["data/csrc/new.cu", "jit/comm.py"]}
    assert ctx.overlay_files == [CHANGED]  # sglang's overlay is sglang's alone
    root = tmp_path / "ctx"
    assert (root / "upstream/packages.txt").read_text() == "flashinfer\n"
    assert sorted(p.relative_to(root / "overlay-packages").as_posix() for p in (root / "overlay-packages").rglob("*")
                  if p.is_file()) == ["flashinfer/data/csrc/new.cu", "flashinfer/jit/comm.py"]
    with tarfile.open(root / "upstream/flashinfer.tar.gz") as tar:
        names = [m.name for m in tar if m.isfile()]
        assert "flashinfer/jit/comm.py" in names and all(n.startswith("flashinfer/") for n in names)
        assert tar.extractfile("flashinfer/jit/comm.py").read() == (fi / "jit/comm.py").read_bytes()
    without = _assemble(tmp_path / "ctx2", patched, pristine)
    assert (tmp_path / "ctx2/upstream/packages.txt").read_text() == "" and without.digest != ctx.digest
    for bad in ("sglang", "../x", "flash-infer"):
        with pytest.raises(BadInput, match="not an import name"):
            _assemble(tmp_path / "ctx3", patched, pristine, others=[OtherPackage(bad, fi, {})])


def test_bake_document_validates(pristine, patched, tmp_path):
    wheel = make_wheel(tmp_path / "wheels", "fp_demo", "1.0", "X = 1\n")
    specs = [
        _spec(_assemble(tmp_path / "ctx" / "v0_5_23-sm120", patched, pristine, wheels=[wheel]), "sm120"),
        _spec(_assemble(tmp_path / "ctx" / "v0_5_23-sm103", patched, pristine), "sm103"),
    ]
    doc = bake_document(specs, tmp_path)
    assert validate(doc, tmp_path) == []
    assert set(doc["target"]) == {"v0_5_23-sm120", "v0_5_23-sm103"}
    assert doc["group"]["default"]["targets"] == ["v0_5_23-sm120", "v0_5_23-sm103"]
    assert doc["group"]["sm120"]["targets"] == ["v0_5_23-sm120"]
    t = doc["target"]["v0_5_23-sm120"]
    assert t["context"] == "ctx/v0_5_23-sm120" and t["dockerfile"] == "Dockerfile" and t["network"] == "none"
    assert t["args"]["TORCH_CUDA_ARCH_LIST"] == "12.0a" and t["tags"][0] == specs[0].tag
    assert t["labels"]["forgepatch.extra-wheels"].startswith("fp_demo-1.0-py3-none-any.whl@sha256:")

    out = tmp_path / "docker-bake.json"
    write_bake(doc, out)
    assert json.loads(out.read_text()) == doc

    broken = json.loads(json.dumps(doc))
    broken["target"]["v0_5_23-sm103"]["args"]["TORCH_CUDA_ARCH_LIST"] = "12.0a"
    broken["target"]["v0_5_23-sm120"]["context"] = "nowhere"
    broken["target"]["bad name!"] = broken["target"]["v0_5_23-sm120"]
    problems = validate(broken, tmp_path)
    assert any("TORCH_CUDA_ARCH_LIST" in p for p in problems)
    assert any("no Dockerfile" in p for p in problems)
    assert any("bad name!" in p for p in problems)
    assert any("default" in p for p in problems)
    with pytest.raises(BadInput):
        write_bake(broken, tmp_path / "broken.json")
    assert not (tmp_path / "broken.json").exists()
