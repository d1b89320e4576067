"""``forgepatch pin add/list``: record pins in matrix.toml, resolved for reproducibility.

A pin is a PyPI release (recorded with the sha256 of its wheel) or a git revision
(recorded as the full commit SHA, with the package version found at that commit). The
file is edited with tomlkit, so comments and layout survive, and written only after the
result validates, through ``config_edit``: under the lock of matrix.toml's directory (two
concurrent ``pin add`` runs serialise; neither loses the other's pin) and its journal (a
crash or Ctrl-C leaves the old or the new file, no temp file).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from forgepatch import srcspec
from forgepatch.errors import BadInput, located
from forgepatch.infra import registry
from forgepatch.infra.gitrepo import GitRepo
from forgepatch.infra.journal import STATE_DIR, commit, open_tree, recover_tree
from forgepatch.infra.refs import parse
from forgepatch.infra.tomlfile import key_line
from forgepatch.paths import SHIPPED_MATRIX, find_config
from forgepatch.sources import pypi_wheel as cached_wheel, wheel_sha256 as digest
from forgepatch.srcspec import NAME_RULE  # noqa: F401 - the rule lives with its check (srcspec)
from forgepatch.wheels import release_wheels


@dataclass
class PinRow:
    name: str
    kind: str  # "pypi" | "rev"
    source: str  # "0.5.23" or the rev as recorded
    resolved: str | None  # wheel sha256 or full SHA
    version: str | None
    default: bool

    def to_json(self) -> dict:
        return self.__dict__.copy()


def editable_config(explicit: Path | None) -> Path:
    """The matrix.toml ``pin add`` may edit: ``--config`` or ``./matrix.toml``, never the
    copy shipped inside the package."""
    path = explicit if explicit is not None else (find_config() or Path("matrix.toml"))
    recover_tree(path.parent)  # an interrupted init / pin add there is finished (or undone) first
    if not path.is_file():
        raise BadInput(f"--config: {path} does not exist (run `forgepatch init` or pass --config FILE)")
    if path.resolve() == SHIPPED_MATRIX.resolve():
        raise BadInput(f"--config: {path} is the matrix shipped with forgepatch; run `forgepatch init` for an editable copy")
    return path


# -- resolving -----------------------------------------------------------------------------
def resolve_rev(repo_path: Path, rev: str, package_dir: str) -> tuple[str, str | None]:
    """(full SHA, package version at that commit or None)."""
    with GitRepo(repo_path) as repo:
        sha = repo.resolve(rev)
        try:
            version = repo.tree(sha, package_dir).version()
        except BadInput:
            version = None
    return sha, version


def pypi_wheel(version: str) -> Path:
    """The ``sglang==version`` wheel in the cache (``forgepatch.sources``), errors as ``--pypi``."""
    try:
        return cached_wheel(version)
    except BadInput as exc:
        raise BadInput(f"--pypi: {str(exc).removeprefix('--source: ')}") from None


def wheel_sha256(version: str) -> str:
    return digest(pypi_wheel(version))


def pypi_entry(version: str) -> dict:
    """What a PyPI pin records: the version, this host's wheel's sha256, and the sha256 of
    every wheel of the release by tag (``wheels``)."""
    return {"pypi": version, "sha256": wheel_sha256(version), "wheels": release_wheels(version)}


def update_pin(config: Path, name: str) -> PinRow:
    """Re-resolve pin ``name`` of ``config`` in place (``pin update``): a PyPI pin's wheels
    and sha256 are recorded again; a git pin's revision is resolved again in its ``repo``
    (default: the current directory), with the version found there."""
    import tomlkit

    from forgepatch.config import load_matrix  # heavy: pydantic (the matrix schema)

    matrix = load_matrix(config)
    if name not in matrix.pins:
        raise BadInput(f"pin update: no pin {name!r} in {config} (pins: {', '.join(matrix.pins) or 'none'})")
    pin = matrix.pins[name]
    if pin.pypi:
        entry = pypi_entry(pin.pypi)
    else:
        sha, version = resolve_rev(Path(pin.repo or "."), pin.rev or "", matrix.upstream.package_dir)
        entry = {"rev": sha, **({"version": version} if version else {})}
    with config_edit(config, "pin update") as edit:
        doc = tomlkit.parse(edit.read())
        try:
            table = doc["pins"][name]
        except KeyError:
            raise BadInput(f"pin update: cannot edit pins.{name} of {config} (a dotted key or inline table)") from None
        for key, value in entry.items():
            table[key] = value
        edit.write(tomlkit.dumps(doc))
    return PinRow(name, "pypi" if pin.pypi else "rev", pin.pypi or pin.rev or "",
                  entry.get("sha256") or entry.get("rev"), pin.pypi or entry.get("version"), name == matrix.default_pin)


# -- editing -------------------------------------------------------------------------------
def add_pin(
    config: Path,
    name: str,
    *,
    rev: str | None = None,
    pypi: str | None = None,
    repo: Path | None = None,
    record_repo: str | None = None,
) -> PinRow:
    """Resolve and append ``[pins.NAME]`` to ``config``; BadInput if NAME exists."""
    import tomlkit

    from forgepatch.config import load_matrix  # heavy: pydantic (the matrix schema)

    if (rev is None) == (pypi is None):
        raise BadInput("pin add: give exactly one of --rev REV or --pypi VERSION")
    if repo is not None and pypi is not None:
        raise BadInput("--repo: only with --rev (a --pypi pin is read from PyPI)")

    try:
        srcspec.check_name(name, "pin add: invalid pin name")
        if pypi is not None:
            srcspec.check_version(pypi, "--pypi")
        if rev is not None:
            srcspec.check_rev(rev, "--rev")
        if record_repo is not None:
            srcspec.check_repo(record_repo, "--repo")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    matrix = load_matrix(config)
    if name in matrix.pins:
        raise BadInput(f"pin add: pin {name!r} already exists in {config}")

    entry: dict[str, str] = {}
    if pypi is not None:
        entry = pypi_entry(pypi)
    else:
        sha, version = resolve_rev(repo or Path("."), rev or "", matrix.upstream.package_dir)
        entry = {"rev": sha}
        if record_repo:
            entry["repo"] = record_repo
        if version:
            entry["version"] = version

    with config_edit(config, "pin add") as edit:
        if name in load_matrix(config).pins:  # added by another run while this one resolved
            raise BadInput(f"pin add: pin {name!r} already exists in {config}")
        doc = tomlkit.parse(edit.read())
        _append_pin(doc, name, entry)
        edit.write(tomlkit.dumps(doc))
    return PinRow(name, "pypi" if pypi else "rev", pypi or rev or "", entry.get("sha256") or entry.get("rev"),
                  pypi or entry.get("version"), False)


def _append_pin(doc, name: str, entry: dict[str, str]) -> None:
    """Add ``[pins.name]`` right after the last existing pin, keeping the comments that
    introduce the next table (tomlkit stores them at the end of the preceding table)."""
    import tomlkit
    from tomlkit.items import Table

    table = tomlkit.table()
    for key, value in entry.items():
        table[key] = value
    pins = doc.get("pins")
    if pins is None:
        doc["pins"] = tomlkit.table(is_super_table=True)
        pins = doc["pins"]
    children = [v for v in pins.value.values() if isinstance(v, Table)] if isinstance(pins, Table) else []
    if children:
        last = children[-1]
        body = last.value.body
        cut = len(body)
        while cut and body[cut - 1][0] is None:
            cut -= 1
        trailing = body[cut:]
        del body[cut:]
        if trailing:
            table.value.body.extend(trailing)
        elif not str(last.as_string()).endswith("\n\n"):
            last.value.body.append((None, tomlkit.ws("\n")))
    pins[name] = table


# -- writing matrix.toml: locked, validated, journaled ------------------------------------
class ConfigEdit:
    """One read-modify-write of matrix.toml inside ``config_edit`` (its directory's lock held)."""

    def __init__(self, config: Path, what: str) -> None:
        self.config = Path(config)
        self.what = what

    def read(self) -> str:
        return self.config.read_text(encoding="utf-8")

    def write(self, text: str) -> None:
        """Validate ``text`` as a matrix, then replace the file through the journal."""
        from forgepatch.config import load_matrix  # heavy: pydantic (the matrix schema)

        state = self.config.parent / STATE_DIR
        check = state / "validate" / self.config.name  # in the state dir: recovery removes it
        check.parent.mkdir(parents=True, exist_ok=True)
        try:
            check.write_text(text, encoding="utf-8")
            load_matrix(check)
        finally:
            check.unlink(missing_ok=True)
            check.parent.rmdir()
        commit(self.config.parent, {self.config.name: text.encode("utf-8")}, self.what)


@contextmanager
def config_edit(config: Path, what: str) -> Iterator[ConfigEdit]:
    """Hold the lock of ``config``'s directory (``journal.open_tree``: waits for a concurrent
    edit, ``FORGEPATCH_LOCK_TIMEOUT``; completes an interrupted one first) for a read of the
    file, an edit and its write: every edit of matrix.toml goes through here."""
    config = Path(config).resolve()
    with open_tree(config.parent, what, write=True):
        yield ConfigEdit(config, what)


def list_pins(matrix) -> list[PinRow]:
    rows = []
    for name, pin in matrix.pins.items():
        kind = "pypi" if pin.pypi else "rev"
        rows.append(
            PinRow(
                name=name,
                kind=kind,
                source=pin.pypi or (f"{pin.repo}@{pin.rev}" if pin.repo else pin.rev or ""),
                resolved=pin.sha256 if pin.pypi else (pin.rev if pin.rev and re.fullmatch(r"[0-9a-f]{40}", pin.rev) else None),
                version=pin.pypi or pin.version,
                default=name == matrix.default_pin,
            )
        )
    return rows


# -- base images by digest -------------------------------------------------------------------
@dataclass
class BasePin:
    arch: str
    was: str  # the reference matrix.toml had
    digest: str  # repo@sha256:... now recorded
    changed: bool  # False: it was pinned to that digest already

    def to_json(self) -> dict:
        return self.__dict__.copy()


def pin_base(config: Path, arch: str, image: str | None = None) -> BasePin:
    """Resolve ``arches.<arch>.base_image`` (or ``image``) to the digest its registry has now
    and record ``base_image = "repo@sha256:..."`` in ``config`` (tomlkit: comments and layout
    kept; validated, then written atomically). A base given by digest is left as it is."""
    import tomlkit

    from forgepatch.config import load_matrix  # heavy: pydantic (the matrix schema)

    matrix = load_matrix(config)
    cfg = matrix.arch(arch)
    current = image or cfg.base_image
    if not current:
        raise BadInput(f"pin base: arches.{arch}.base_image is not set in {config}; pass --image REPO:TAG")
    ref = parse(current, "--image" if image else f"arches.{arch}.base_image")
    if ref.digest and not image:
        return BasePin(arch, current, f"{ref.name}@{ref.digest}", False)
    digest = registry.Registry(ref).head(ref)
    if digest is None:
        raise BadInput(f"pin base: registry {ref.host} has no {ref}")
    pinned = f"{ref.name}@{digest}"
    if pinned == cfg.base_image:
        return BasePin(arch, current, pinned, False)
    with config_edit(config, "pin base") as edit:
        text = edit.read()
        doc = tomlkit.parse(text)
        try:
            table = doc["arches"][arch]
        except KeyError:  # an arch defined in a dotted key or inline table we do not edit
            raise BadInput(located(config, key_line(text, ("arches", arch)), f"pin base: cannot edit arches.{arch}")) from None
        item = tomlkit.string(pinned)
        if ref.tag:
            item.comment(f"pinned from {ref.name}:{ref.tag} by `forgepatch pin base`")
        table["base_image"] = item
        edit.write(tomlkit.dumps(doc))
    return BasePin(arch, current, pinned, True)
