"""The probe's CPU-side logic: tolerances, failure signatures, device assessment, verdicts,
the JSON document's shape and the summary."""

from __future__ import annotations

import json
import math

import pytest

from forgepatch.arch import ARCHES
from forgepatch.inimage.probe_result import (
    BF16_VS_EAGER, EXACT, EXIT_CODES, FAIL, INCOMPATIBLE, NO_GPU, PASS, SCHEMA, CheckResult,
    Tolerance, aggregate_verdict, assess_devices, build_document, format_summary, signature_of,
)

H200 = ("NVIDIA H200 #0", (9, 0))
TORCH_LIST = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def test_tolerance_rule_is_atol_plus_rtol_times_reference():
    tol = Tolerance(rtol=0.01, atol=0.1)
    assert tol.allows(0.1, 0.0) and not tol.allows(0.1001, 0.0)
    assert tol.allows(1.1, 100.0) and not tol.allows(1.11, 100.0)
    assert tol.allows(-1.1, -100.0)  # magnitudes
    assert not tol.allows(math.nan, 1.0) and not tol.allows(0.0, math.nan)
    assert "0.1 + 0.01*|ref|" in tol.describe()


def test_tolerance_compare_reports_max_error_and_rejects_nan_and_shape_mismatch():
    ok, err = BF16_VS_EAGER.compare([1.0, 2.0, 3.01], [1.0, 2.0, 3.0])
    assert ok and err == pytest.approx(0.01)
    ok, err = BF16_VS_EAGER.compare([1.0, 2.5], [1.0, 2.0])
    assert not ok and err == pytest.approx(0.5)
    ok, err = BF16_VS_EAGER.compare([math.nan], [1.0])
    assert not ok and math.isnan(err)
    assert BF16_VS_EAGER.compare([1.0], [1.0, 2.0]) == (False, math.inf)
    assert EXACT.compare([36.0, 37.0], [36.0, 37.0]) == (True, 0.0)
    assert not EXACT.compare([36.0], [36.125])[0]


@pytest.mark.parametrize(
    "text, signature",
    [
        ("Traceback...\nRuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
         "`cublasGemmStridedBatchedEx( handle, opa, opb, ...)`",
         "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmStridedBatchedEx"),
        ("RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_NOT_SUPPORTED"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be",
         "CUDA error: an illegal memory access was encountered"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda error",
         "NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda error"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory"),
        ("RuntimeError: No supported CUDA architectures found for major versions [9, 10]",
         "No supported CUDA architectures found for major versions [9, 10]"),
        ("Traceback (most recent call last):\n  File x\nValueError: bad shape\n\n", "ValueError: bad shape"),
        ("", "unknown failure"),
    ],
)
def test_signature_of(text, signature):
    assert signature_of(text) == signature


def test_signature_is_bounded():
    assert len(signature_of("E: " + "x" * 1000)) == 200


def test_assess_devices_torch_list_and_expected_arch():
    ok, reasons = assess_devices(TORCH_LIST, [H200], ARCHES["sm90"])
    assert ok and len(reasons) == 2
    ok, reasons = assess_devices(TORCH_LIST, [H200], None)
    assert ok and len(reasons) == 1
    ok, reasons = assess_devices(TORCH_LIST, [H200], ARCHES["sm120"])
    assert not ok and any("sm_120a" in r and "sm_90" in r for r in reasons)
    ok, reasons = assess_devices(["sm_100", "sm_120"], [H200, ("NVIDIA H200 #1", (9, 0))], None)
    assert not ok and sum("no target" in r for r in reasons) == 2
    # A B300 with a torch built without sm_103: fine (sm_100 cubins), and an sm103 image targets it.
    ok, reasons = assess_devices(TORCH_LIST, [("NVIDIA B300", (10, 3))], ARCHES["sm103"])
    assert ok, reasons


def _check(name, status):
    return CheckResult(name, status, 0.1)


@pytest.mark.parametrize(
    "statuses, flags, verdict",
    [
        ([PASS, PASS, PASS], {}, PASS),
        ([PASS, FAIL, PASS], {}, FAIL),
        ([PASS, "skipped"], {}, PASS),
        ([FAIL, "skipped"], {}, FAIL),
        (["skipped"], {}, FAIL),
        ([], {}, FAIL),  # nothing ran is not a pass
        ([], {"incompatible": True}, INCOMPATIBLE),
        ([PASS], {"no_gpu": True}, NO_GPU),
        ([], {"no_gpu": True, "incompatible": True}, NO_GPU),
    ],
)
def test_aggregate_verdict(statuses, flags, verdict):
    assert aggregate_verdict([_check(f"c{i}", s) for i, s in enumerate(statuses)], **flags) == verdict


def test_exit_codes_contract():
    assert EXIT_CODES == {PASS: 0, FAIL: 1, INCOMPATIBLE: 3, NO_GPU: 3}


def _document(verdict=FAIL):
    checks = [
        CheckResult("bmm", PASS, 0.05, max_error=0.0, tolerance="t", metrics={"capture_ms": 1.2, "replay_us": 35.0}),
        CheckResult("mlp", FAIL, 0.07, phase="capture", signature="CUDA error: x", max_error=math.nan),
        CheckResult("allreduce", PASS, 3.2, max_error=0.0,
                    ranks=[{"rank": 0, "status": PASS, "metrics": {"init_s": 1.1}},
                           {"rank": 1, "status": FAIL, "phase": "replay", "signature": "timeout"}]),
    ]
    return build_document(
        verdict=verdict, reason="mlp failed", versions={"python": "3.12", "torch": "2.11.0", "cuda": "13.0", "nccl": "2.28.9"},
        devices=[{"index": 0, "name": "NVIDIA H200", "cc": "9.0", "arch": "sm90"}],
        torch_arch_list=TORCH_LIST, expected_arch="sm90", expected_arch_source="--arch",
        compatibility={"ok": True, "reasons": []}, settings={"gpus": 2, "replays": 20},
        checks=checks, timings={"import_torch_s": 4.61234, "total_s": 7.0}, seconds=7.0004,
    )


def test_document_shape_is_json_with_the_contract_keys():
    doc = json.loads(json.dumps(_document(), allow_nan=False))  # strict JSON: no NaN
    assert doc["schema"] == SCHEMA
    assert set(doc) >= {"verdict", "exit_code", "reason", "versions", "devices", "torch_arch_list",
                        "expected_arch", "compatibility", "checks", "timings", "seconds", "settings"}
    assert doc["verdict"] == FAIL and doc["exit_code"] == 1
    assert [c["name"] for c in doc["checks"]] == ["bmm", "mlp", "allreduce"]
    for c in doc["checks"]:
        assert set(c) >= {"name", "status", "seconds", "max_error", "phase", "signature"}
    assert doc["checks"][1]["max_error"] == "nan"
    assert "ranks" not in doc["checks"][0] and len(doc["checks"][2]["ranks"]) == 2
    assert doc["timings"]["import_torch_s"] == 4.6123 and doc["seconds"] == 7.0


def test_summary_is_readable():
    text = format_summary(_document())
    assert text.splitlines()[0].startswith("forgepatch probe: FAIL")
    assert "gpu 0: NVIDIA H200 (sm_90, sm90)" in text
    assert "phase=capture signature=CUDA error: x" in text
    assert "rank 1: fail phase=replay signature=timeout" in text
    assert "capture_ms=1.2" in text
