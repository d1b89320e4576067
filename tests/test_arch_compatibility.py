"""NVIDIA's binary-compatibility rules as ``forgepatch.arch`` encodes them (cubins, ``a``/``f``
variants, PTX JIT), and whether an image built for an arch targets a device."""

from __future__ import annotations

import pytest

from forgepatch.arch import ARCHES, compatibility, image_targets_device, parse_target, target_runs_on

# The arch list torch 2.11.0+cu130 reported on the lent H200 machine (docs/architecture.md, Facts).
TORCH_211_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize(
    "token, cc, runs",
    [
        ("sm_100", (10, 3), True),    # B300 runs sm_100 cubins: same major, higher minor
        ("sm_100", (10, 0), True),
        ("sm_103", (10, 0), False),   # never a newer minor's cubin on an older device
        ("sm_90", (10, 0), False),    # cubins never cross majors
        ("sm_80", (8, 6), True),
        ("sm_86", (8, 0), False),
        ("sm_90a", (9, 0), True),     # arch-specific: exactly 9.0
        ("sm_100a", (10, 3), False),  # ... so not on 10.3
        ("sm_120a", (12, 1), False),
        ("sm_100f", (10, 3), True),   # family-specific: same major, minor >= 0
        ("sm_103f", (10, 0), False),
        ("sm_120f", (12, 1), True),
        ("compute_90", (10, 0), True),   # PTX is JIT-compiled for any newer device
        ("compute_90", (12, 1), True),
        ("compute_100", (9, 0), False),  # ... never an older one
        ("compute_90a", (9, 0), True),   # arch-specific PTX: only exactly that arch
        ("compute_90a", (10, 0), False),
        ("compute_100f", (10, 3), True),  # family PTX stays within the family
        ("compute_100f", (12, 0), False),
    ],
)
def test_target_runs_on(token, cc, runs):
    assert target_runs_on(token, cc) is runs


def test_parse_target_rejects_non_targets():
    assert parse_target("sm_100a") == ("sm", (10, 0), "a")
    for bad in ("sm_", "gfx90a", "sm_x0", "9.0"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_torch_211_build_runs_on_every_registered_arch():
    # No sm_103 in the list: a B300 runs the sm_100 cubins; sm_121 runs sm_120's.
    for arch in ARCHES.values():
        ok, reason = compatibility(TORCH_211_CU130, arch.cc)
        assert ok, (arch.name, reason)
    ok, reason = compatibility(TORCH_211_CU130, (10, 3))
    assert "sm_100" in reason and "sm_103" in reason


def test_compatibility_falls_back_to_ptx_and_explains_refusals():
    ok, reason = compatibility(["sm_80", "compute_80"], (9, 0))
    assert ok and reason.startswith("PTX compute_80")
    ok, reason = compatibility(["sm_80", "sm_86"], (9, 0))
    assert not ok and "sm_80, sm_86" in reason and "sm_90" in reason
    ok, _ = compatibility(["sm_90a"], (9, 0))
    assert ok
    ok, _ = compatibility(["sm_100a"], (10, 3))  # an arch-specific sm100 build does not run on B300
    assert not ok
    ok, reason = compatibility([], (9, 0))
    assert not ok and "empty" in reason


def test_image_targets_device_uses_the_arch_specific_token():
    ok, reason = image_targets_device(ARCHES["sm90"], (9, 0))
    assert ok and "sm_90a" in reason
    ok, reason = image_targets_device(ARCHES["sm120"], (9, 0))
    assert not ok and "sm_120a" in reason and "sm_90" in reason and "--arch sm90" in reason
    ok, reason = image_targets_device(ARCHES["sm100"], (10, 3))  # sm100 image on a B300
    assert not ok and "--arch sm103" in reason
    assert image_targets_device(ARCHES["sm103"], (10, 3))[0]
    ok, reason = image_targets_device(ARCHES["sm90"], (7, 5))  # an unregistered device
    assert not ok and "--arch" not in reason
