"""Runs INSIDE the image build (stdlib only, Python >= 3.8): installs forgepatch's pieces.

    install.py inimage [--min-cuda X.Y] make /opt/forgepatch/inimage/python (forgepatch.inimage
                                        and what it imports) importable (.pth), check the
                                        base's torch CUDA version if torch is there
    install.py upstream                 unpack the pin's unpatched sglang/ over the installed
                                        one, delete the files the patches delete, and link
                                        /opt/forgepatch/sglang -> that directory (the overlay
                                        layer is a COPY through the link); the same for each
                                        other package of upstream/packages.txt (flashinfer/,
                                        linked as /opt/forgepatch/packages/<name>: every
                                        file of it), and its distribution metadata
                                        (upstream/dist-info/<name>/) beside it when the base
                                        has no distribution of that name
    install.py overlay                  copy each other package's changed files
                                        (/opt/forgepatch/overlay-packages/<name>/) into it

"Installed one" = wherever ``python3`` finds the package in the base image (importlib, without
importing it: site-packages or an editable checkout such as
/sgl-workspace/sglang/python/sglang); site-packages when absent.
Every failure exits non-zero with a one-line ``forgepatch-install: error: ...`` message.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile

ROOT = "/opt/forgepatch"
INIMAGE_PATH = ROOT + "/inimage/python"
TARGET_RECORD = ROOT + "/sglang-target"
LINK = ROOT + "/sglang"  # -> the installed sglang package dir; the overlay COPY goes through it
PACKAGES_LIST = ROOT + "/upstream/packages.txt"  # other packages (import names), one a line
PACKAGE_LINKS = ROOT + "/packages"  # <name> -> where Python imports that package from
OTHER_OVERLAY = ROOT + "/overlay-packages"
DIST_INFO = ROOT + "/upstream/dist-info"  # <name>/<DIST-VERSION>.dist-info/: a wheel's metadata


def fail(message: str) -> None:
    print("forgepatch-install: error: " + message, file=sys.stderr)
    sys.exit(1)


def site_packages() -> str:
    """The purelib directory Python searches (Debian: /usr/local/lib/python3.X/dist-packages)."""
    candidates = [sysconfig.get_paths()["purelib"]] + list(site.getsitepackages())
    for path in candidates:
        if path in sys.path:
            os.makedirs(path, exist_ok=True)
            return path
    fail("no site-packages directory of %s is on sys.path (%s)" % (sys.executable, candidates))
    raise AssertionError


def fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter from / (what a container's Python sees)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["(no output)"]
        fail("%s -c %r failed: %s" % (sys.executable, code, lines[-1]))
    return proc.stdout.strip()


def detect_target(name: str = "sglang") -> str:
    """Directory of the package ``name`` Python imports, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return os.path.join(site_packages(), name)
    if spec.origin and os.path.basename(spec.origin) == "__init__.py":
        return os.path.dirname(os.path.realpath(spec.origin))
    if spec.submodule_search_locations:  # namespace package (no __init__.py)
        return os.path.realpath(list(spec.submodule_search_locations)[0])
    fail("%s resolves to %s, which is not a package directory" % (name, spec.origin))
    raise AssertionError


def drop_bytecode(directory: str, name: str) -> None:
    stem, ext = os.path.splitext(name)
    cache = os.path.join(directory, "__pycache__")
    if ext == ".py" and os.path.isdir(cache):
        for pyc in os.listdir(cache):
            if pyc.startswith(stem + ".") and pyc.endswith(".pyc"):
                os.remove(os.path.join(cache, pyc))


def cmd_inimage(min_cuda: str) -> None:
    pth = os.path.join(site_packages(), "forgepatch-inimage.pth")
    with open(pth, "w") as fh:
        fh.write(INIMAGE_PATH + "\n")
    where = fresh_python("import forgepatch.inimage, os; print(os.path.realpath(forgepatch.inimage.__file__))")
    if not where.startswith(INIMAGE_PATH + "/"):
        fail("another forgepatch package (%s) shadows the in-image one in %s" % (where, INIMAGE_PATH))
    print("forgepatch.inimage importable from %s (via %s)" % (INIMAGE_PATH, pth))
    check_cuda(min_cuda)


def check_cuda(min_cuda: str) -> None:
    """Refuse a base whose torch was built for an older CUDA than the arch needs."""
    spec = importlib.util.find_spec("torch")
    if not min_cuda or spec is None or not spec.origin:
        print("torch not installed in the base image: CUDA version not checked")
        return
    version_py = os.path.join(os.path.dirname(spec.origin), "version.py")
    try:
        text = open(version_py).read()
    except OSError:
        return
    found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([0-9.]+)['\"]", text, re.M)
    if not found:
        print("torch in the base image has no CUDA build: CUDA version not checked")
        return
    have = tuple(int(x) for x in found.group(1).split(".")[:2])
    need = tuple(int(x) for x in min_cuda.split(".")[:2])
    if have < need:
        fail("base image torch is built for CUDA %s; this arch needs CUDA >= %s" % (found.group(1), min_cuda))
    print("base image torch CUDA %s >= %s" % (found.group(1), min_cuda))


def extract_package(archive: str, dst: str, prefix: str = "sglang") -> int:
    """Write the ``<prefix>/...`` members of ``archive`` under ``dst`` (regular files only)."""
    count = 0
    with tarfile.open(archive) as tar:
        for member in tar:
            rel = os.path.normpath(member.name)
            if not member.isfile() or not rel.startswith(prefix + os.sep):
                continue
            rel = rel[len(prefix) + 1 :]
            if rel.startswith(".." + os.sep) or os.path.isabs(rel):
                fail("unsafe member %s in %s" % (member.name, archive))
            out = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with tar.extractfile(member) as src, open(out, "wb") as fh:
                shutil.copyfileobj(src, fh)
            os.chmod(out, 0o644)
            os.utime(out, (member.mtime, member.mtime))
            drop_bytecode(os.path.dirname(out), os.path.basename(out))
            count += 1
    return count


def cmd_upstream() -> None:
    target = detect_target()
    with open(TARGET_RECORD, "w") as fh:
        fh.write(target + "\n")
    count = extract_package(ROOT + "/upstream/sglang.tar.gz", target)
    removed = 0
    for rel in open(ROOT + "/upstream/removed.txt").read().split("\n"):
        path = os.path.join(target, rel)
        if rel and os.path.isfile(path):
            os.remove(path)
            drop_bytecode(os.path.dirname(path), os.path.basename(path))
            removed += 1
    # The overlay layer is a plain COPY into this symlink (no RUN, so it stays small and fast).
    if os.path.islink(LINK) or os.path.isfile(LINK):
        os.remove(LINK)
    os.symlink(target, LINK)
    code = "import importlib.util as u, os; s = u.find_spec('sglang'); print(os.path.realpath(s.origin))"
    origin = fresh_python(code)
    if os.path.dirname(origin) != os.path.realpath(target):
        fail("python imports sglang from %s, not %s" % (origin, target))
    print("sglang at %s (linked from %s): %d upstream files, %d removed" % (target, LINK, count, removed))
    for name in other_packages():
        target = detect_target(name)
        count = extract_package(ROOT + "/upstream/" + name + ".tar.gz", target, name)
        os.makedirs(PACKAGE_LINKS, exist_ok=True)
        link = os.path.join(PACKAGE_LINKS, name)
        if os.path.islink(link) or os.path.isfile(link):
            os.remove(link)
        os.symlink(target, link)
        check_imported_from(name, target)
        print("%s at %s (linked from %s): %d upstream files" % (name, target, link, count))
        install_dist_info(name, target)


def metadata_field(path: str, field: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                break  # the headers end at the first blank line
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    fail("%s has no %s field" % (path, field))
    raise AssertionError


def installed_version(dist: str) -> str:
    """The version of distribution ``dist`` a fresh python3 finds ('' when none)."""
    code = ("import importlib.metadata as m\ntry:\n    print(m.version(%r))\n"
            "except m.PackageNotFoundError:\n    print('')" % dist)
    return fresh_python(code)


def install_dist_info(name: str, target: str) -> None:
    """The wheel's NAME-VERSION.dist-info of package ``name`` (when the context carries one)
    into the directory python3 imports the package from, unless the base has that distribution
    already (the same version: kept; another: refused)."""
    src_root = os.path.join(DIST_INFO, name)
    if not os.path.isdir(src_root):
        return  # a git revision or a directory: no wheel metadata
    infos = [d for d in sorted(os.listdir(src_root)) if d.endswith(".dist-info")]
    if len(infos) != 1:
        fail("%s: expected one .dist-info directory, found %d" % (src_root, len(infos)))
    src = os.path.join(src_root, infos[0])
    dist, version = metadata_field(src + "/METADATA", "Name"), metadata_field(src + "/METADATA", "Version")
    have = installed_version(dist)
    if have == version:
        print("%s %s: the base's distribution metadata kept" % (dist, version))
        return
    if have:
        fail("the base has %s %s installed; the image carries %s" % (dist, have, version))
    dest = os.path.join(os.path.dirname(target), infos[0])
    if os.path.lexists(dest):
        fail("%s exists but python3 finds no %s distribution" % (dest, dist))
    copy_files(src, dest)
    if installed_version(dist) != version:
        fail("python3 does not find %s %s after installing %s" % (dist, version, dest))
    print("%s %s: distribution metadata at %s" % (dist, version, dest))


def copy_files(src_root: str, dest: str) -> list:
    """Every file under ``src_root`` to the same place under ``dest`` (mode 0644); the paths
    written."""
    written = []
    for dirpath, _dirs, files in os.walk(src_root):
        for fname in sorted(files):
            out = os.path.join(dest, os.path.relpath(os.path.join(dirpath, fname), src_root))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(os.path.join(dirpath, fname), out)
            os.chmod(out, 0o644)
            written.append(out)
    return written


def other_packages() -> list:
    """The packages besides sglang the series patches (upstream/packages.txt)."""
    try:
        names = open(PACKAGES_LIST).read().split()
    except FileNotFoundError:
        return []
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == "sglang":
            fail("%s: %r is not a package's import name" % (PACKAGES_LIST, name))
    return names


def check_imported_from(name: str, target: str) -> None:
    code = ("import importlib.util as u, os; s = u.find_spec(%r); "
            "print(os.path.realpath(s.origin) if s and s.origin else '')" % name)
    origin = fresh_python(code)
    if os.path.dirname(origin) != os.path.realpath(target):
        fail("python imports %s from %s, not %s" % (name, origin or "nowhere", target))


def cmd_overlay() -> None:
    """Each other package's changed files into the directory Python imports it from."""
    for name in other_packages():
        target = os.path.realpath(os.path.join(PACKAGE_LINKS, name))
        written = copy_files(os.path.join(OTHER_OVERLAY, name), target)
        for out in written:
            drop_bytecode(os.path.dirname(out), os.path.basename(out))
        count = len(written)
        check_imported_from(name, target)
        print("%s at %s: %d patched files" % (name, target, count))


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("inimage", "upstream", "overlay"):
        fail("usage: install.py inimage [--min-cuda X.Y] | upstream | overlay")
    if argv[0] == "inimage":
        min_cuda = argv[2] if len(argv) > 2 and argv[1] == "--min-cuda" else ""
        cmd_inimage(min_cuda)
    elif argv[0] == "overlay":
        cmd_overlay()
    else:
        cmd_upstream()


if __name__ == "__main__":
    main(sys.argv[1:])
