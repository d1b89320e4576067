"""matrix.toml: schema, loading and validation. Every error names file:line and the key.

```toml
default_pin = "v0.5.23"
[upstream]            # where SGLang comes from
[packages.NAME]       # another patched package: pypi = "flashinfer-python", import_name, package_dir
[pins.NAME]           # pypi = "0.5.23"  |  rev = "<sha>"  (+ resolved facts)
[pins.NAME.packages.flashinfer]  # pypi = "0.7.2" | rev = "<sha>" (+ sha256): that package's pin
[arches.sm120]        # patches = [...], base_image, build_args, extra_wheels, profiles
[profiles.NAME]       # flags = ["--tp-size 8", ...], gpus = 8, required = true
```
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from forgepatch import srcspec
from forgepatch.arch import ARCHES
from forgepatch.combination import DEFAULT_SMOKE_IMAGE, RELEASE_TAG_TEMPLATE
from forgepatch.errors import BadInput, located
from forgepatch.infra.journal import recover_tree
from forgepatch.infra.tomlfile import key_line, read_toml
from forgepatch.packages import KNOWN
from forgepatch.paths import SHIPPED_MATRIX, check_path, find_config


class _Strict(BaseModel):
    # strict: no coercion ("false" is not a bool, 1 is not a string); unknown keys refused
    model_config = ConfigDict(extra="forbid", strict=True)


def _nonempty(values: list[str] | None, what: str = "list") -> list[str] | None:
    """An explicit empty array is refused where it would silently mean something else
    (``pins = []`` would read as every pin): leave the key out instead."""
    if values is not None and not values:
        raise ValueError(f"empty {what}; leave the key out instead")
    for v in values or []:
        if not v:
            raise ValueError("an empty string in the list")
    return values


def _check(fn, value, what):
    try:
        return fn(value, what)
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix(f"{what}: ")) from None


class Upstream(_Strict):
    name: str = "sglang"
    repo: str = "https://github.com/sgl-project/sglang"
    package_dir: str = "python/sglang"  # where the package lives in the git repo


class PackageConfig(_Strict):
    """``[packages.NAME]``: a package patches may declare besides sglang (see ``packages``)."""

    pypi: str | None = None  # the PyPI distribution name (flashinfer-python)
    import_name: str | None = None  # the import package (flashinfer)
    package_dir: str | None = None  # where it lives in a git checkout
    repo: str | None = None  # its upstream git repository

    @field_validator("pypi", "import_name", "package_dir")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,127}", v) or (v and ".." in v):
            raise ValueError(f"{v!r} is not a package name or relative directory")
        return v

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str | None) -> str | None:
        return None if v is None else _check(srcspec.check_repo, v, "repo")


class _SourcePin(_Strict):
    """Where a pinned package comes from: a release on PyPI (with its wheel digest once
    resolved) or a git revision (full SHA once resolved) of a repository."""

    KIND: ClassVar[str] = "a pin"

    pypi: str | None = None  # a release version on PyPI
    rev: str | None = None  # a git revision (full SHA once resolved)
    repo: str | None = None  # git repo for rev pins (default: the fork's own repo)
    sha256: str | None = None  # resolved wheel digest for pypi pins

    @field_validator("pypi")
    @classmethod
    def _pypi(cls, v: str | None) -> str | None:
        return None if v is None else _check(srcspec.check_version, v, "pypi")

    @field_validator("rev")
    @classmethod
    def _rev(cls, v: str | None) -> str | None:
        return None if v is None else _check(srcspec.check_rev, v, "rev")

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str | None) -> str | None:
        return None if v is None else _check(srcspec.check_repo, v, "repo")

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9a-f]{64}", v):
            raise ValueError(f"{v[:70]!r} is not a sha256 (64 lower-case hex digits)")
        return v

    @model_validator(mode="after")
    def _one_source(self):
        if (self.pypi is None) == (self.rev is None):
            raise ValueError(f"{self.KIND} needs exactly one of 'pypi' or 'rev'")
        if self.repo is not None and self.rev is None:
            raise ValueError("'repo' only applies to a 'rev' pin")
        return self


class PackagePin(_SourcePin):
    """``[pins.NAME.packages.PKG]``: the version (or git revision) of another package that
    goes with the pin, recorded like the pin itself (wheel sha256 / full SHA)."""

    KIND: ClassVar[str] = "a package pin"

    def source(self, dist: str, repo: str | None = None) -> str:
        """The package pin as a SRC string (``pypi:flashinfer-python==0.7.2``)."""
        if self.pypi:
            return f"pypi:{dist}=={self.pypi}"
        return f"git:{self.repo or repo or '.'}@{self.rev}"


class Pin(_SourcePin):
    wheels: dict[str, str] = Field(default_factory=dict)  # pypi pins: wheel tag -> sha256 (wheels)
    version: str | None = None  # upstream version of a rev pin, if known
    markers: dict[str, str] = Field(default_factory=dict)  # log-marker overrides for smoke
    packages: dict[str, PackagePin] = Field(default_factory=dict)  # other packages' versions

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        return None if v is None else _check(srcspec.check_text, v, "version")

    @field_validator("wheels")
    @classmethod
    def _wheels(cls, v: dict[str, str]) -> dict[str, str]:
        for tag, digest in v.items():
            if not re.fullmatch(r"[0-9a-z_.]+-[0-9a-z_.]+", tag):
                raise ValueError(f"wheel tag {tag[:70]!r} is not PYTHONTAG-PLATFORM (e.g. cp311-manylinux_2_34_x86_64)")
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"wheels.{tag}: {str(digest)[:70]!r} is not a sha256 (64 lower-case hex digits)")
        return v

    @property
    def source(self) -> str:
        """The pin as a SRC string for ``--source``."""
        if self.pypi:
            return f"pypi:{self.pypi}"
        return f"git:{self.repo or '.'}@{self.rev}"


class ArchConfig(_Strict):
    patches: list[str] = Field(default_factory=list)
    base_image: str | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    extra_wheels: list[str] = Field(default_factory=list)
    profiles: list[str] = Field(default_factory=list)  # smoke profiles to run for this arch
    pins: list[str] | None = None  # None: every pin
    audit: bool = False  # `forgepatch build` fails when a CUDA library of the image has no code for the arch

    @field_validator("pins")
    @classmethod
    def _pins(cls, v: list[str] | None) -> list[str] | None:
        return _nonempty(v, "list of pins (an arch with no pins is not built)")

    @field_validator("patches", "extra_wheels", "profiles")
    @classmethod
    def _items(cls, v: list[str]) -> list[str]:
        if any(not item for item in v):
            raise ValueError("an empty string in the list")
        return v


class Profile(_Strict):
    # what a smoke job of this profile runs: "server" (python -m sglang.launch_server with
    # `flags`, wait for Ready, one chat completion), "probe" (the graph-capture probe) or
    # "command" (`command`, judged by its exit code). Default: "probe" for a profile named
    # probe, else "server".
    kind: Literal["server", "probe", "command"] | None = None
    command: str | None = None  # for kind = "command": a shell-style command line
    flags: list[str] = Field(default_factory=list)  # flag groups: "--ep-size 8"
    gpus: int = 1
    required: bool = True  # must pass for a release
    network: bool = False
    timeout_s: int = 1800
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("flags")
    @classmethod
    def _flag_groups(cls, flags: list[str]) -> list[str]:
        for group in flags:
            if not re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9_-]*(\s+\S.*)?", group.strip()):
                raise ValueError(f"malformed flag group {group!r} (want '--name [value]')")
        return [g.strip() for g in flags]

    @model_validator(mode="after")
    def _command(self) -> "Profile":
        if self.kind == "command" and not self.command:
            raise ValueError("a profile of kind 'command' needs 'command'")
        if self.command and self.kind not in (None, "command"):
            raise ValueError(f"'command' only applies to kind 'command', not {self.kind!r}")
        if self.command and self.kind is None:
            self.kind = "command"
        return self

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, n: int) -> int:
        if not 0 <= n <= 4096:
            raise ValueError("gpus must be between 0 and 4096")
        return n

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, n: int) -> int:
        if not 0 < n <= 7 * 24 * 3600:
            raise ValueError("timeout_s must be > 0 and at most a week")
        return n


class Rule(_Strict):
    arch: str | None = None
    pin: str | None = None
    profile: str | None = None

    @model_validator(mode="after")
    def _some_key(self) -> "Rule":
        if self.arch is None and self.pin is None and self.profile is None:
            raise ValueError("a rule needs at least one of arch, pin, profile (an empty rule matches every job)")
        return self

    def matches(self, arch: str, pin: str, profile: str) -> bool:
        return all(
            want is None or want == got
            for want, got in ((self.arch, arch), (self.pin, pin), (self.profile, profile))
        )


class Smoke(_Strict):
    model: str | None = None  # model path for the SGLang server tier
    # the server command the smoke driver launches (flags and --model-path are appended)
    server_command: str = "python3 -m sglang.launch_server"
    # the image a job runs in; {repo}, {arch}, {pin} are filled in (`--image` overrides)
    image: str = DEFAULT_SMOKE_IMAGE
    include: list[Rule] = Field(default_factory=list)
    exclude: list[Rule] = Field(default_factory=list)
    image_repo: str = "forgepatch/sglang"


class Release(_Strict):
    tag_template: str = RELEASE_TAG_TEMPLATE
    ledger: str = "releases/ledger.json"
    require_signed_tags: bool = False  # every release tag must be signed (and verify)


class Matrix(_Strict):
    default_pin: str
    upstream: Upstream = Field(default_factory=Upstream)
    packages: dict[str, PackageConfig] = Field(default_factory=dict)
    pins: dict[str, Pin]
    arches: dict[str, ArchConfig] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    smoke: Smoke = Field(default_factory=Smoke)
    release: Release = Field(default_factory=Release)
    path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _references(self) -> "Matrix":
        for kind in ("pins", "profiles"):
            for name in getattr(self, kind):
                try:
                    srcspec.check_name(name, "name")
                except ValueError as exc:
                    raise _RefError((kind, name), str(exc).removeprefix("name: ")) from None
        if self.default_pin not in self.pins:
            raise _RefError(("default_pin",), f"unknown pin {self.default_pin!r}")

        for name in self.packages:
            try:
                srcspec.check_name(name, "name")
            except ValueError as exc:
                raise _RefError(("packages", name), str(exc).removeprefix("name: ")) from None
        for pname, pin in self.pins.items():
            for pkg in pin.packages:
                if pkg == "sglang":
                    raise _RefError(("pins", pname, "packages", pkg), "sglang is the pin itself (pypi/rev of the pin)")
                if pkg not in KNOWN and pkg not in self.packages:
                    raise _RefError(("pins", pname, "packages", pkg),
                                    f"unknown package {pkg!r} (known: {', '.join(sorted(set(KNOWN) | set(self.packages)))})")
        for name, arch in self.arches.items():
            if name not in ARCHES:
                raise _RefError(("arches", name), f"unknown arch {name!r} (known: {', '.join(ARCHES)})")
            for prof in arch.profiles:
                if prof not in self.profiles:
                    raise _RefError(("arches", name, "profiles"), f"unknown profile {prof!r}")
            for pin in arch.pins or []:
                if pin not in self.pins:
                    raise _RefError(("arches", name, "pins"), f"unknown pin {pin!r}")
        for kind in ("include", "exclude"):
            for rule in getattr(self.smoke, kind):
                for field, known in (("arch", self.arches), ("pin", self.pins), ("profile", self.profiles)):
                    value = getattr(rule, field)
                    if value is not None and value not in known:
                        raise _RefError(("smoke", kind), f"unknown {field} {value!r}")
        return self

    def pin(self, name: str | None) -> tuple[str, Pin]:
        name = name or self.default_pin
        if name not in self.pins:
            raise BadInput(f"--pin: unknown pin {name!r} (known: {', '.join(self.pins)})")
        return name, self.pins[name]

    def arch(self, name: str) -> ArchConfig:
        if name not in self.arches:
            where = self.path or "matrix.toml"
            raise BadInput(f"--arch: {name!r} is not configured in {where} (arches: {', '.join(self.arches)})")
        return self.arches[name]

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise BadInput(f"--profile: unknown profile {name!r} (known: {', '.join(self.profiles)})")
        return self.profiles[name]

    def pins_of(self, arch: str) -> list[str]:
        """The pins ``arch`` is built for (``arches.<arch>.pins``, default every pin)."""
        return list(self.arches[arch].pins or self.pins)

    def combos(self) -> list[tuple[str, str, str]]:
        """The smoke job set, (arch, pin, profile) in a stable order: each arch's profiles for
        each of its pins, minus ``[[smoke.exclude]]`` matches, plus ``[[smoke.include]]``
        matches (GitHub-matrix semantics; a rule's missing keys match anything configured)."""
        base = [(a, p, prof) for a, cfg in self.arches.items() for p in self.pins_of(a) for prof in cfg.profiles]
        kept = [c for c in base if not any(r.matches(*c) for r in self.smoke.exclude)]
        everything = [(a, p, prof) for a in self.arches for p in self.pins for prof in self.profiles]
        for rule in self.smoke.include:
            kept += [c for c in everything if rule.matches(*c) and c not in kept]
        return kept

    def profile_kind(self, name: str) -> str:
        """``server`` | ``probe`` | ``command`` (a profile named ``probe`` defaults to probe)."""
        prof = self.profile(name)
        return prof.kind or ("probe" if name == "probe" else "server")


class _RefError(ValueError):
    def __init__(self, loc: tuple[str, ...], msg: str):
        super().__init__(msg)
        self.loc, self.msg = loc, msg


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class PatchCatalog(Protocol):
    """What the schema needs to know of the patches (``patching.library.PatchLibrary`` is
    one): the ids it has, and the message for one it lacks. Passed in, so the contract does
    not import the engine (docs/architecture.md)."""

    files: Mapping[str, Any]

    def missing(self, pid: str) -> str: ...


def load_matrix(path: Path, patches: PatchCatalog | None = None) -> Matrix:
    """Parse and validate; with ``patches``, also check that every named patch exists."""
    check_path(path, "--config", "file")  # a FIFO or device is never read (it could block)
    text, data = read_toml(path, "config")
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        ctx = err.get("ctx", {}).get("error")
        if isinstance(ctx, _RefError):
            loc, msg = loc + ctx.loc if not loc else ctx.loc, ctx.msg
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "missing (required)"
            elif isinstance(err.get("input"), (str, int, float, bool)) and err["type"].endswith(("_type", "literal_error")):
                msg += f" (got {_shown(err['input'])})"
        key = ".".join(str(k) for k in loc if not isinstance(k, int)) or "(top level)"
        if len(key) > 100:
            key = key[:60] + "..." + key[-30:]
        raise BadInput(located(path, key_line(text, loc), f"{key}: {msg}")) from None
    matrix.path = path
    if patches is not None:
        library = patches
        for name, arch in matrix.arches.items():
            for patch in arch.patches:
                if patch not in library.files:
                    loc = ("arches", name, "patches")
                    raise BadInput(located(path, key_line(text, loc), f"arches.{name}.patches: {library.missing(patch)}"))
    return matrix


def default_config(explicit: Path | None = None) -> Path:
    """``--config`` if given, else the matrix.toml ``paths.find_config`` finds (this directory
    or the nearest parent, up to the repository root), else the shipped one. An interrupted
    ``init``/``pin add`` in that directory is finished (or undone) first (``journal``)."""
    chosen = explicit if explicit is not None else (find_config() or Path("matrix.toml"))
    recover_tree(chosen.parent)
    if explicit is not None:
        return explicit
    return chosen if chosen.is_file() else SHIPPED_MATRIX
