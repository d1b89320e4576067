"""The arch registry: the only place facts about GPU architectures live.

Stdlib only: the graph-capture probe imports it inside images that carry torch and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from forgepatch.errors import BadInput


@dataclass(frozen=True)
class Arch:
    name: str  # "sm120"
    gpus: tuple[str, ...]
    cc: tuple[int, int]  # compute capability (major, minor)
    torch_arch: str  # TORCH_CUDA_ARCH_LIST token, e.g. "12.0a"
    min_cuda: tuple[int, int]
    # The SGLang predicate family whose gates accept this arch (sm103 passes sm100 gates
    # because SGLang tests ``major == 10``; sm121 passes sm120 gates).
    gate_family: str

    @property
    def cuda_arch(self) -> str:
        """``CUDA_ARCHITECTURES``-style token, e.g. ``120a``."""
        return f"{self.cc[0]}{self.cc[1]}a"

    # -- the three idioms SGLang uses to spell an arch predicate ---------------------------
    @property
    def family_function(self) -> str:
        return f"is_{self.gate_family}_supported"

    @property
    def family_attribute(self) -> str:
        return f"is_{self.gate_family}"

    def build_args(self) -> dict[str, str]:
        """Docker build args that select kernels for this arch."""
        return {
            "FORGEPATCH_ARCH": self.name,
            "TORCH_CUDA_ARCH_LIST": self.torch_arch,
            "CUDA_ARCHITECTURES": self.cuda_arch,
            "FLASHINFER_CUDA_ARCH_LIST": self.torch_arch,
            "MIN_CUDA_VERSION": "%d.%d" % self.min_cuda,
        }


ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm90", ("H100", "H200"), (9, 0), "9.0a", (12, 0), "sm90"),
        Arch("sm100", ("B200", "GB200"), (10, 0), "10.0a", (12, 8), "sm100"),
        Arch("sm103", ("B300", "GB300"), (10, 3), "10.3a", (12, 9), "sm100"),
        Arch("sm120", ("RTX PRO 6000 Blackwell", "RTX 5090"), (12, 0), "12.0a", (12, 8), "sm120"),
        Arch("sm121", ("DGX Spark GB10",), (12, 1), "12.1a", (12, 9), "sm120"),
    )
}

# The predicate families that upstream's gates admit and that a new arch's test is added
# next to (sm120: `is_sm90 or is_sm100` gains `is_sm120`), in the order a reference arch is
# tried: the patch's target must be admitted as ONE of them is.
SIBLING_FAMILIES: tuple[str, ...] = ("sm100", "sm90")


def get_arch(name: str) -> Arch:
    """Look up an arch by its name; one spelling rule for every command (``--arch``):

    case is ignored, ``sm_120`` is ``sm120``, and the compute capability (``12.0``) or an
    arch-specific / family token (``12.0a``, ``sm_120a``, ``sm120f``) names its arch. Anything
    else is BadInput naming the choices, with the closest one as a suggestion."""
    canonical = normalise_arch(name)
    if canonical is None:
        import difflib

        key = str(name).strip().lower().replace("_", "").replace("-", "")
        scores = {a: difflib.SequenceMatcher(None, key, a).ratio() for a in ARCHES}
        best = max(scores.values())
        close = [a for a, score in scores.items() if score == best and score >= 0.75]
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise BadInput(f"--arch: unknown arch {name!r} (known: {', '.join(ARCHES)}){hint}")
    return ARCHES[canonical]


def normalise_arch(name: str) -> str | None:
    """The registry name ``name`` spells (see :func:`get_arch`), or None."""
    key = str(name).strip().lower()
    if key.startswith("sm_"):
        key = "sm" + key[3:]
    if key in ARCHES:
        return key
    if key.startswith("sm") and key[-1:] in ("a", "f") and key[:-1] in ARCHES:
        return key[:-1]
    for arch in ARCHES.values():
        if key in ("%d.%d" % arch.cc, arch.torch_arch, "%d.%df" % arch.cc):
            return arch.name
    return None


def arch_for_cc(cc: tuple[int, int]) -> Arch | None:
    for arch in ARCHES.values():
        if arch.cc == tuple(cc):
            return arch
    return None


def parse_target(token: str) -> tuple[str, tuple[int, int], str]:
    """Split a torch arch-list entry (``sm_90a``, ``compute_120``, ``sm_100f``) into
    (kind, (major, minor), variant) where kind is ``sm`` (cubin) or ``compute`` (PTX)
    and variant is "", "a" (arch-specific) or "f" (family-specific)."""
    kind, _, num = token.partition("_")
    variant = ""
    if num and num[-1] in "af":
        num, variant = num[:-1], num[-1]
    if kind not in ("sm", "compute") or not num.isdigit() or len(num) < 2:
        raise ValueError(f"not a CUDA target: {token!r}")
    return kind, (int(num[:-1]), int(num[-1])), variant


def target_runs_on(token: str, cc: tuple[int, int]) -> bool:
    """NVIDIA's binary-compatibility rules for one compiled target on a device of ``cc``.

    - cubin ``sm_XY``: runs on the same major with minor >= Y (sm_100 cubins run on sm_103);
    - arch-specific ``sm_XYa``: runs only on exactly X.Y;
    - family-specific ``sm_XYf``: runs on the same major with minor >= Y;
    - PTX ``compute_XY``: JIT-compiled by the driver for any device >= X.Y
      (``compute_XYa`` PTX only for exactly X.Y, ``compute_XYf`` only within the family).
    """
    kind, (major, minor), variant = parse_target(token)
    cc = (int(cc[0]), int(cc[1]))
    if variant == "a":
        return (major, minor) == cc
    if kind == "compute" and variant == "":
        return cc >= (major, minor)
    return cc[0] == major and cc[1] >= minor


def compatibility(arch_list: list[str], cc: tuple[int, int]) -> tuple[bool, str]:
    """Can a build with ``arch_list`` (``torch.cuda.get_arch_list()``) run on ``cc``?

    Returns (ok, reason); the reason names the target that matches, or why none does.
    """
    cubins = [t for t in arch_list if t.startswith("sm_") and target_runs_on(t, cc)]
    if cubins:
        return True, f"cubin {cubins[-1]} runs on sm_{cc[0]}{cc[1]}"
    ptx = [t for t in arch_list if t.startswith("compute_") and target_runs_on(t, cc)]
    if ptx:
        return True, f"PTX {ptx[-1]} is JIT-compiled for sm_{cc[0]}{cc[1]}"
    return False, (
        f"no target in [{', '.join(arch_list) or 'empty'}] runs on sm_{cc[0]}{cc[1]}: "
        "cubins need the same major and minor <= the device's, PTX needs an older or equal arch"
    )


def image_targets_device(arch: Arch, cc: tuple[int, int]) -> tuple[bool, str]:
    """Do the kernels an image builds for ``arch`` (its ``TORCH_CUDA_ARCH_LIST`` token, an
    arch-specific ``a`` cubin) run on a device of ``cc``? Returns (ok, reason)."""
    token = f"sm_{arch.cuda_arch}"
    device = f"sm_{cc[0]}{cc[1]}"
    if target_runs_on(token, cc):
        return True, f"{arch.name} image ({token} kernels) matches the {device} device"
    return False, (
        f"{arch.name} image builds {token} kernels, which run only on sm_{arch.cc[0]}{arch.cc[1]}; "
        f"this device is {device}"
        + (f" (use --arch {arch_for_cc(cc).name})" if arch_for_cc(cc) else "")
    )
