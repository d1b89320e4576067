"""Time limits from the environment (lock wait, patch import) are read by one checker: a bad
value is one line of bad input naming the variable, never a silent default."""

from __future__ import annotations

import pytest

from forgepatch import envsettings
from forgepatch.infra import journal
from forgepatch.errors import BadInput
from forgepatch.patching import guard


@pytest.mark.parametrize("raw, want", [("", 30.0), ("0", 0.0), ("0.3", 0.3), ("120", 120.0)])
def test_lock_wait_accepts_zero_or_more(monkeypatch, raw, want):
    monkeypatch.setenv("FORGEPATCH_LOCK_TIMEOUT", raw)
    assert journal.lock_timeout() == want


@pytest.mark.parametrize("raw, why", [("soon", "is not a number of seconds"), ("-1", "must be 0 or more"),
                                      ("nan", "must be 0 or more")])
def test_lock_wait_refuses_nonsense(monkeypatch, raw, why):
    monkeypatch.setenv("FORGEPATCH_LOCK_TIMEOUT", raw)
    with pytest.raises(BadInput, match=rf"^\$FORGEPATCH_LOCK_TIMEOUT: .*{why}"):
        journal.lock_timeout()


@pytest.mark.parametrize("raw, ok", [("2", True), ("3600", True), ("0", False), ("3601", False), ("inf", False),
                                     ("x", False)])
def test_patch_import_limit_is_positive_and_bounded(monkeypatch, raw, ok):
    monkeypatch.setenv(guard.TIMEOUT_ENV, raw)
    if ok:
        assert guard.import_timeout() == float(raw)
    else:
        with pytest.raises(BadInput, match=rf"^\${guard.TIMEOUT_ENV}: "):
            guard.import_timeout()


def test_a_long_value_is_cut_in_the_message(monkeypatch):
    monkeypatch.setenv("FP_TEST_SECONDS", "9" * 5000 + "x")
    with pytest.raises(BadInput) as err:
        envsettings.seconds("FP_TEST_SECONDS", 1.0, allow_zero=True)
    assert len(str(err.value)) < 120
