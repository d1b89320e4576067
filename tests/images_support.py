"""Helpers for the image tests: real SGLang release trees, real wheels, engine bookkeeping."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import zipfile
from pathlib import Path

RELEASE = "0.5.23"  # the default pin's release


def release_tree(version: str = RELEASE) -> Path:
    """The ``sglang/`` package (``.py`` files) of a PyPI release, downloaded once into the
    forgepatch cache (the same tree ``--source pypi:VERSION`` patches). Never edit it: tests
    work on a ``linked_copy``."""
    from forgepatch.sources import resolve_source

    return Path(resolve_source(f"pypi:{version}").package)


def linked_copy(tree: Path, dest: Path) -> Path:
    """A cheap copy of a package tree (hard links); edit files with ``rewrite``."""
    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copy2(src, dst)

    shutil.copytree(tree, dest, copy_function=link_or_copy)
    return dest


def rewrite(path: Path, text: str) -> None:
    """Replace a (possibly hard-linked) file without touching the other links."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def make_wheel(directory: Path, name: str, version: str, module_text: str) -> Path:
    """A real pure-Python wheel (PEP 427 layout with a correct RECORD)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_text.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: forgepatch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in files.items():
            zf.writestr(zipfile.ZipInfo(arc, (2000, 1, 1, 0, 0, 0)), data)
    return path


def run_in(client, image: str, script: str) -> str:
    """Run ``sh -c script`` in a throwaway container (network none); stdout+stderr."""
    out = client.containers.run(image, ["sh", "-c", script], network_mode="none", remove=True, stderr=True)
    return out.decode()


def log_image_ids(log_text: str) -> set[str]:
    """Short image IDs the classic builder printed (' ---> 1a2b3c4d5e6f')."""
    return set(re.findall(r"---> ([0-9a-f]{12})\b", log_text))


def containers_from(client, short_ids: set[str]) -> list[str]:
    """Containers (running or not) whose image is one of ``short_ids``."""
    out = []
    for c in client.api.containers(all=True):
        image_id = c.get("ImageID", "").removeprefix("sha256:")
        if image_id[:12] in short_ids:
            out.append(c["Id"][:12])
    return out


def remove_intermediates(client, log_text: str, keep: str) -> None:
    """Remove the untagged step images a failed build left (newest first), never ``keep``."""
    keep_id = client.api.inspect_image(keep)["Id"].removeprefix("sha256:")[:12]
    for short in reversed(re.findall(r"---> ([0-9a-f]{12})\b", log_text)):
        if short == keep_id:
            continue
        try:
            if not client.api.inspect_image(short).get("RepoTags"):
                client.api.remove_image(short)
        except Exception:  # already gone, or shared with another image: leave it
            pass


def build_from_files(client, tag: str, dockerfile: str, files: dict[str, bytes]) -> str:
    """An image built from a Dockerfile and files held in memory (network off); its ID."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("Dockerfile", dockerfile.encode())] + list(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True, network_mode="none")
    return client.api.inspect_image(tag)["Id"]
