"""The Python packages a fork patches: SGLang and the libraries it ships with (FlashInfer).

A package is named once (``sglang``, ``flashinfer``) and known by its PyPI distribution
(``flashinfer-python``), its import package (``flashinfer``) and where it lives in a git
checkout (``python/sglang``). The two this module knows are the defaults; ``matrix.toml``'s
``[packages.NAME]`` overrides them or adds others (``[upstream]`` still configures sglang).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

DEFAULT = "sglang"  # the package a patch is for when it does not say


@dataclass(frozen=True)
class Package:
    name: str  # forgepatch's name for it (a patch's `package = "..."`)
    dist: str  # the PyPI distribution (`pip download DIST==VERSION`)
    import_name: str  # the import package: the directory a wheel holds, `import NAME`
    package_dir: str  # where the import package lives in a git checkout
    repo: str | None = None  # the upstream git repository, if known

    @property
    def wheel_prefix(self) -> str:
        """How the distribution's wheel file names start (PEP 427 escapes '-' as '_')."""
        return re.sub(r"[-_.]+", "_", self.dist)


KNOWN: dict[str, Package] = {
    "sglang": Package("sglang", "sglang", "sglang", "python/sglang", "https://github.com/sgl-project/sglang"),
    "flashinfer": Package("flashinfer", "flashinfer-python", "flashinfer", "flashinfer",
                          "https://github.com/flashinfer-ai/flashinfer"),
}


def normalize_dist(dist: str) -> str:
    """PEP 503 normalised distribution name (``Flashinfer_Python`` = ``flashinfer-python``)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def packages(matrix: Any = None) -> dict[str, Package]:
    """Every package this run knows: the defaults, ``[upstream]`` for sglang, then the
    matrix's ``[packages.NAME]`` tables over them."""
    out = dict(KNOWN)
    if matrix is None:
        return out
    upstream = getattr(matrix, "upstream", None)
    if upstream is not None:
        out["sglang"] = replace(out["sglang"], package_dir=upstream.package_dir, repo=upstream.repo)
    for name, cfg in (getattr(matrix, "packages", None) or {}).items():
        base = out.get(name)
        out[name] = Package(
            name,
            cfg.pypi or (base.dist if base else name),
            cfg.import_name or (base.import_name if base else name),
            cfg.package_dir or (base.package_dir if base else (cfg.import_name or name)),
            cfg.repo or (base.repo if base else None),
        )
    return out


def get(name: str, matrix: Any = None) -> Package | None:
    return packages(matrix).get(name)


def by_dist(dist: str, matrix: Any = None) -> Package | None:
    """The package whose PyPI distribution is ``dist`` (normalised), or None."""
    want = normalize_dist(dist)
    return next((p for p in packages(matrix).values() if normalize_dist(p.dist) == want), None)


def names(matrix: Any = None) -> list[str]:
    return list(packages(matrix))
