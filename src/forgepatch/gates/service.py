"""Gate inventories of sources (``pypi:VERSION``, ``git:PATH@REV``, a directory), memoised:
an immutable source (a release wheel by its sha256, a git commit) is inventoried once per
version of this code, in ``cache_dir("gates")`` (safe to delete)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from forgepatch import arch, gates
from forgepatch.errors import BadInput
from forgepatch.gates.inventory import inventory, inventory_files
from forgepatch.gates.jitlists import scan
from forgepatch.gates.model import Inventory
from forgepatch.infra.atomic import write_atomic
from forgepatch.packages import get
from forgepatch.paths import cache_dir
from forgepatch.sources import resolve_source


def code_digest() -> str:
    """Hash of the gates package's own code: a new analysis invalidates the memo."""
    digest = hashlib.sha256()
    for path in sorted(Path(gates.__file__).parent.glob("*.py")) + [Path(arch.__file__)]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _memo_path(key: str) -> Path:
    return cache_dir("gates") / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _load(key: str) -> Inventory | None:
    path = _memo_path(key)
    try:
        inv = Inventory.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    inv.stats = dict(inv.stats, memo=True)
    return inv


def _store(key: str, inv: Inventory) -> None:
    write_atomic(_memo_path(key), json.dumps(inv.to_json()))


def source_inventory(spec: str | None, matrix=None, memo: bool = True) -> Inventory:
    """The inventory of SRC (None: the matrix's default pin)."""
    started = time.perf_counter()
    tree = resolve_source(spec, matrix)
    key = f"{tree.label}\0{tree.revision}\0{code_digest()}" if tree.kind in ("pypi", "git") and tree.revision else None
    if memo and key and (hit := _load(key)) is not None:
        hit.stats["seconds"] = round(time.perf_counter() - started, 3)
        return hit
    inv = inventory(tree.package, tree.label, tree.version)
    if memo and key:
        _store(key, inv)
    return inv


def tree_inventory(tree, label: str, version: str | None, memo: dict | None = None) -> Inventory:
    """The inventory of a git tree (drift's revisions), memoised by tree id in ``memo``
    (a mapping such as drift's blob cache)."""
    key = f"gates:{code_digest()}:{tree.tree_id}"
    if memo is not None:
        try:
            return Inventory.from_json(memo[key])
        except KeyError:
            pass
    paths = tree.paths()
    tree.prefetch(paths)
    inv = inventory_files({rel: tree.read(rel) for rel in paths}, label, version)
    if memo is not None:
        memo[key] = inv.to_json()
    return inv


def package_jit_lists(spec: str | None, matrix, package: str):
    """The JIT arch lists (``gates.jitlists``) of ``package`` (not sglang): from SRC, else the
    matrix's default pin's ``[pins.PIN.packages.NAME]`` release of it. Returns (tree, lists)."""
    info = get(package, matrix)
    if info is None or package == "sglang":
        raise BadInput(f"--package: {package!r} is not a package besides sglang this run knows "
                       f"(declare it as [packages.{package}] in matrix.toml)")
    if spec is None:
        if matrix is None:
            raise BadInput(f"--package {package}: give --source pypi:{info.dist}==VERSION (no matrix.toml)")
        name, pin = matrix.pin(None)
        pp = pin.packages.get(package)
        if pp is None:
            raise BadInput(f"--package {package}: the default pin {name!r} names no version of it; give --source "
                           f"pypi:{info.dist}==VERSION or add [pins.\"{name}\".packages.{package}] to matrix.toml")
        spec = pp.source(info.dist, info.repo)
    tree = resolve_source(spec, matrix)
    if tree.package_name != package:
        raise BadInput(f"--source: {spec!r} holds {tree.package_name}, not {package}")
    return tree, scan(Path(tree.package))
