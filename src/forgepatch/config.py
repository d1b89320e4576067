"""matrix.toml: schema, loading and validation. Every error names file:line and the key.

```toml
default_pin = "v0.5.23"
[upstream]            # where SGLang comes from
[pins.NAME]           # pypi = "0.5.23"  |  rev = "<sha>"  (+ resolved facts)
[arches.sm120]        # patches = [...], base_image, build_args, extra_wheels, profiles
[profiles.NAME]       # flags = ["--tp-size 8", ...], gpus = 8, required = true
```
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from forgepatch.arch import ARCHES
from forgepatch.combination import DEFAULT_SMOKE_IMAGE
from forgepatch.errors import BadInput, located


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Upstream(_Strict):
    name: str = "sglang"
    repo: str = "https://github.com/sgl-project/sglang"
    package_dir: str = "python/sglang"  # where the package lives in the git repo


class Pin(_Strict):
    pypi: str | None = None  # a release version on PyPI
    rev: str | None = None  # a git revision (full SHA once resolved)
    repo: str | None = None  # git repo for rev pins (default: the fork's own repo)
    sha256: str | None = None  # resolved wheel digest for pypi pins
    version: str | None = None  # upstream version of a rev pin, if known
    markers: dict[str, str] = Field(default_factory=dict)  # log-marker overrides for smoke

    @model_validator(mode="after")
    def _one_source(self) -> "Pin":
        if (self.pypi is None) == (self.rev is None):
            raise ValueError("a pin needs exactly one of 'pypi' or 'rev'")
        return self

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
        if n < 0:
            raise ValueError("gpus must be >= 0")
        return n


class Rule(_Strict):
    arch: str | None = None
    pin: str | None = None
    profile: str | None = None

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
    tag_template: str = "forgepatch/{pin}/{arch}"
    ledger: str = "releases/ledger.json"


class Matrix(_Strict):
    default_pin: str
    upstream: Upstream = Field(default_factory=Upstream)
    pins: dict[str, Pin]
    arches: dict[str, ArchConfig] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    smoke: Smoke = Field(default_factory=Smoke)
    release: Release = Field(default_factory=Release)
    path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _references(self) -> "Matrix":
        if self.default_pin not in self.pins:
            raise _RefError(("default_pin",), f"unknown pin {self.default_pin!r}")
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


def key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line of a key path in TOML text: the key itself, else the deepest
    enclosing table header or dotted key that is a prefix of it."""
    keys = [str(k) for k in loc if not isinstance(k, int)]
    split = lambda s: [p.strip().strip("\"'") for p in s.split(".")]  # noqa: E731
    best, best_len, table = None, 0, []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if header := re.fullmatch(r"\[\[?\s*([^\]]+?)\s*\]\]?", line):
            table = full = split(header.group(1))
        elif assign := re.match(r"([A-Za-z0-9_.\"' -]+?)\s*=", line):
            full = table + split(assign.group(1))
        else:
            continue
        if full == keys:
            return no
        if keys[: len(full)] == full and len(full) > best_len:
            best, best_len = no, len(full)
    return best


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """``tomllib.loads`` with errors as ``file:line: invalid TOML: ...`` (BadInput)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise BadInput(located(path, int(m.group(1)) if m else None, f"invalid TOML: {exc}")) from None


def load_matrix(path: Path, patches_dir=None) -> Matrix:
    """Parse and validate; with ``patches_dir`` (a ``PatchLibrary`` or a directory), also
    check that every named patch exists."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read config: {exc.strerror}") from exc
    data = parse_toml(path, text)
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
        key = ".".join(str(k) for k in loc if not isinstance(k, int)) or "(top level)"
        raise BadInput(located(path, key_line(text, loc), f"{key}: {msg}")) from exc
    matrix.path = path
    if patches_dir is not None:
        from forgepatch.patching.library import as_library

        library = as_library(patches_dir)
        for name, arch in matrix.arches.items():
            for patch in arch.patches:
                if patch not in library.files:
                    loc = ("arches", name, "patches")
                    raise BadInput(located(path, key_line(text, loc), f"arches.{name}.patches: {library.missing(patch)}"))
    return matrix
