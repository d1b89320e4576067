"""Real images on a real Docker engine: sm103 and sm120 from a real SGLang release tree.

The package-level tests here drive ``build_image`` with a release tree and a one-file edit
(what a patch does to the tree); test_images_cli.py drives ``forgepatch build`` through the
patch engine.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from forgepatch.arch import get_arch
from forgepatch.errors import Failure
from forgepatch.images.build import BuildFailed, build_image
from forgepatch.combination import Upstream
from forgepatch.images.context import image_files
from forgepatch.images.prepare import build_context
from forgepatch.images.spec import ImageSpec, SourceFacts
from forgepatch.paths import PACKAGE_DIR
from images_support import (
    containers_from, linked_copy, log_image_ids, make_wheel, release_tree, remove_intermediates, rewrite, run_in,
)

pytestmark = pytest.mark.docker

CHANGED = "srt/layers/flashinfer_comm_fusion.py"
SITE = "/usr/local/lib/python3.11/dist-packages"  # Debian's purelib: where sglang goes when absent
TOKEN = "hf_forgepatchPLANTEDtoken0123456789"


class Builds:
    """Builds images under a repo unique to this test session; removes them at the end."""

    def __init__(self, client, base_image, root: Path):
        self.client, self.base_image, self.root = client, base_image, root
        self.pin = f"t{uuid.uuid4().hex[:8]}"
        self.repo = f"forgepatch-test/sglang-{self.pin}"
        self.pristine = release_tree()
        self.patched = linked_copy(self.pristine, root / "patched" / "sglang")
        rewrite(self.patched / CHANGED, (self.pristine / CHANGED).read_text() + "\n# forgepatch test edit\n")

    def spec(self, arch: str, *, package=None, wheels=(), base_image=None, name=None) -> ImageSpec:
        ctx = build_context(self.root / "ctx" / (name or arch), package or self.patched, self.pristine, list(wheels))
        return ImageSpec(get_arch(arch), self.pin, self.repo, base_image or self.base_image, ctx,
                         SourceFacts(Upstream("pypi", "0.5.23", "a" * 64)), patchset="test-patchset")

    def build(self, spec: ImageSpec, **kw):
        log = self.root / "logs" / f"{uuid.uuid4().hex[:6]}.log"
        return build_image(spec, api=self.client.api, log_path=log, **kw)

    def cleanup(self) -> None:
        for image in self.client.api.images(name=self.repo):
            self.client.api.remove_image(image["Id"], force=True)


@pytest.fixture(scope="module")
def builds(docker_client, base_image, tmp_path_factory):
    b = Builds(docker_client, base_image, tmp_path_factory.mktemp("images"))
    yield b
    b.cleanup()


@pytest.fixture(scope="module")
def built(builds):
    """Cold builds (no layer cache) of sm103 and sm120."""
    out = {}
    for arch in ("sm103", "sm120"):
        spec = builds.spec(arch)
        out[arch] = (spec, builds.build(spec, force=True))
    return out


@pytest.mark.parametrize("arch,token", [("sm103", "10.3a"), ("sm120", "12.0a")])
def test_image_runs_the_overlay_and_the_probe(builds, built, arch, token):
    spec, result = built[arch]
    assert not result.cache_hit and result.tags == [spec.tag, spec.moving_tag]
    script = (
        "python3 -c 'import importlib.util as u; print(u.find_spec(\"sglang\").origin)'; "
        "echo ARCH=$TORCH_CUDA_ARCH_LIST/$FORGEPATCH_ARCH; "
        f"tail -n 1 {SITE}/sglang/{CHANGED}; "
        "python3 -c 'import forgepatch.arch as a; print(a.__file__, a.get_arch(\"" + arch + "\").torch_arch)'; "
        "ls /opt/forgepatch/sglang/srt >/dev/null && echo LINK-OK"
    )
    out = run_in(builds.client, spec.tag, script).splitlines()
    assert out[0] == f"{SITE}/sglang/__init__.py"
    assert out[1] == f"ARCH={token}/{arch}"
    assert out[2] == "# forgepatch test edit"
    assert out[3] == f"/opt/forgepatch/inimage/python/forgepatch/arch.py {token}"
    assert out[4] == "LINK-OK"

    labels = builds.client.api.inspect_image(spec.tag)["Config"]["Labels"]
    assert labels["forgepatch.arch"] == arch
    assert labels["forgepatch.pin"] == builds.pin
    assert labels["forgepatch.upstream"] == "pypi:0.5.23"
    assert labels["forgepatch.patchset"] == "test-patchset"
    assert labels["forgepatch.context-hash"] == spec.content_hash
    assert labels["forgepatch.torch-cuda-arch-list"] == token
    assert labels["org.opencontainers.image.version"] == "0.5.23"
    assert labels["org.opencontainers.image.revision"] == "a" * 64
    assert labels["org.opencontainers.image.source"] == "https://github.com/sgl-project/sglang"
    assert labels["org.opencontainers.image.created"].endswith("Z")
    assert spec.tag.endswith(f":{builds.pin}-{arch}-{spec.content_hash[:12]}")


IMPORT_ALL = """
import importlib, pkgutil, sys, forgepatch.inimage as pkg
names = sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
for name in names:
    importlib.import_module(name)
heavy = sorted(m for m in ("typer", "rich", "libcst", "git", "docker", "pydantic", "torch") if m in sys.modules)
print("imported", len(names), "heavy", heavy)
print("\\n".join(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith("forgepatch"))))
"""


def test_every_inimage_module_imports_in_the_image(builds, built):
    """Inside the image (base: Debian's python3, no torch, no forgepatch dependencies) every
    module of ``forgepatch.inimage`` imports, pulling in only forgepatch files the image
    carries; the probe and the server driver start."""
    spec, _ = built["sm120"]
    script = (f"python3 -c '{IMPORT_ALL}' && python3 -m forgepatch.inimage.probe --help >/dev/null "
              "&& python3 -m forgepatch.inimage.server --help >/dev/null && python3 -m forgepatch.inimage.toolchain; echo rc=$?")
    out = run_in(builds.client, spec.tag, script)
    assert out.rstrip().endswith("rc=0"), out
    inimage = [p for p in image_files(PACKAGE_DIR) if p.startswith("inimage/") and not p.endswith("__init__.py")]
    assert f"imported {len(inimage)} heavy []" in out
    root = "/opt/forgepatch/inimage/python/forgepatch/"
    loaded = [line.removeprefix(root) for line in out.splitlines() if line.startswith("/")]
    assert loaded and all(line.startswith(root) for line in out.splitlines() if line.startswith("/")), out
    assert set(loaded) <= set(image_files(PACKAGE_DIR))
    assert "[forgepatch-toolchain] {" in out


def test_unchanged_rebuild_is_a_cache_hit(builds, built):
    spec, first = built["sm120"]
    again = builds.build(builds.spec("sm120"))
    assert again.cache_hit and again.steps == []
    assert again.image_id == first.image_id and again.content_hash == spec.content_hash


def test_one_file_change_rebuilds_only_the_overlay_layer(builds, built):
    spec, first = built["sm120"]
    package = linked_copy(builds.patched, builds.root / "patched2" / "sglang")
    rewrite(package / CHANGED, (package / CHANGED).read_text() + "# second edit\n")
    second_spec = builds.spec("sm120", package=package, name="sm120-second")
    second = builds.build(second_spec)
    assert not second.cache_hit and second.content_hash != first.content_hash
    assert second.rebuilt_steps == ["COPY overlay/sglang/ /opt/forgepatch/sglang/"]

    api = builds.client.api
    old_layers = api.inspect_image(first.image_id)["RootFS"]["Layers"]
    new_layers = api.inspect_image(second.image_id)["RootFS"]["Layers"]
    assert len(new_layers) == len(old_layers)
    assert new_layers[:-1] == old_layers[:-1] and new_layers[-1] != old_layers[-1]
    out = run_in(builds.client, second_spec.tag, f"tail -n 2 {SITE}/sglang/{CHANGED}")
    assert out.splitlines() == ["# forgepatch test edit", "# second edit"]


def test_editable_checkout_in_the_base_is_patched_in_place(builds, tmp_path):
    """A base like lmsysorg/sglang: sglang imported from a source checkout via a .pth."""
    client = builds.client
    ctx = tmp_path / "base"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {builds.base_image}\n"
        "RUN mkdir -p /sgl-workspace/sglang/python/sglang/srt/layers "
        "&& echo '__version__ = \"checkout\"' > /sgl-workspace/sglang/python/sglang/__init__.py "
        "&& echo '{\"base\": true}' > /sgl-workspace/sglang/python/sglang/srt/layers/base_only.json "
        f"&& echo /sgl-workspace/sglang/python > {SITE}/sglang-editable.pth\n"
    )
    base_tag = f"{builds.repo}-editable-base:latest"
    client.images.build(path=str(ctx), tag=base_tag, network_mode="none", rm=True, forcerm=True)
    spec = None
    try:
        spec = builds.spec("sm120", base_image=base_tag, name="sm120-editable")
        builds.build(spec)
        checkout = "/sgl-workspace/sglang/python/sglang"
        script = (
            "python3 -c 'import importlib.util as u; print(u.find_spec(\"sglang\").origin)'; "
            f"tail -n 1 {checkout}/{CHANGED}; cat {checkout}/srt/layers/base_only.json; "
            f"test -e {SITE}/sglang && echo SITE-COPY || echo NO-SITE-COPY"
        )
        assert run_in(client, spec.tag, script).splitlines() == [
            f"{checkout}/__init__.py", "# forgepatch test edit", '{"base": true}', "NO-SITE-COPY",
        ]
    finally:
        for ref in ([spec.tag, spec.moving_tag] if spec else []) + [base_tag]:
            try:
                client.api.remove_image(ref)  # untags; deletes once no tag/child holds it
            except Exception:
                pass


def test_extra_wheel_installed_offline_and_planted_token_leaks_nowhere(builds, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", TOKEN)
    wheel = make_wheel(tmp_path / "wheels", "fp_allreduce_demo", "1.0", 'KERNELS = "sm120"\n')
    spec = builds.spec("sm120", wheels=[wheel], name="sm120-wheel")
    result = builds.build(spec, force=True)
    assert not result.cache_hit
    labels = builds.client.api.inspect_image(spec.tag)["Config"]["Labels"]
    assert labels["forgepatch.extra-wheels"].startswith("fp_allreduce_demo-1.0-py3-none-any.whl@sha256:")
    assert spec.content_hash != builds.spec("sm120").content_hash
    out = run_in(builds.client, spec.tag, "python3 -c 'import fp_allreduce_demo as m; print(m.KERNELS)'")
    assert out.strip() == "sm120"

    # No layer, label, history entry, env or log line holds the token. `docker save` output
    # carries the layers as uncompressed tars, so a byte search covers every file in them.
    needle, control, tail, seen = TOKEN.encode(), b"# forgepatch test edit", b"", False
    for chunk in builds.client.images.get(spec.tag).save(named=False):
        window = tail + chunk
        assert needle not in window
        seen = seen or control in window  # the search does see file contents of the layers
        tail = window[-64:]
    assert seen
    inspect = json.dumps(builds.client.api.inspect_image(spec.tag))
    history = json.dumps(builds.client.api.history(spec.tag))
    assert TOKEN not in inspect and TOKEN not in history
    assert TOKEN not in result.log.read_text()
    assert "HF_TOKEN" not in json.dumps(spec.engine_args(result.labels))


def test_failed_build_names_the_step_and_leaves_no_container(builds, tmp_path):
    broken = tmp_path / "wheels" / "broken_kernels-1.0-py3-none-any.whl"
    broken.parent.mkdir()
    broken.write_bytes(b"this is not a zip file")
    spec = builds.spec("sm120", wheels=[broken], name="sm120-broken")
    with pytest.raises(BuildFailed) as err:
        builds.build(spec, force=True)
    exc = err.value
    assert isinstance(exc, Failure) and exc.exit_code == 1
    message = str(exc)
    assert "\n" not in message
    assert "failed at step" in message and "pip install --no-index" in message
    assert "exited with code" in message and "broken" in message.split("last output:")[1]
    assert exc.tail and any("broken_kernels" in line or "zip" in line.lower() for line in exc.tail)
    intermediates = log_image_ids(exc.log.read_text())
    assert containers_from(builds.client, intermediates) == []
    assert builds.client.api.images(filters={"label": f"forgepatch.context-hash={spec.content_hash}"}) == []
    remove_intermediates(builds.client, exc.log.read_text(), keep=builds.base_image)
