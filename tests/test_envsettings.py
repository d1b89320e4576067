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


# -- every command, readers included (issue 28 item 7) -----------------------------------------
@pytest.mark.parametrize("raw", ["-1", "abc", "nan", "inf", "1e9"])
def test_a_reader_refuses_a_bad_lock_wait_instead_of_reading_unlocked(monkeypatch, tmp_path, raw):
    """A reader that cannot lock reads unlocked; a bad setting is no such case (it used to be
    swallowed there, and the tree was read without the lock)."""
    monkeypatch.setenv("FORGEPATCH_LOCK_TIMEOUT", raw)
    with pytest.raises(BadInput, match=r"^\$FORGEPATCH_LOCK_TIMEOUT: "):
        with journal.open_tree(tmp_path, "reading", write=False):
            pass


@pytest.mark.parametrize("raw", ["-1", "abc", "nan", "inf"])
@pytest.mark.parametrize("argv", [("apply", "--check", "--source", "{tree}", "--patch", "tiny-gate"),
                                  ("gates", "--source", "{tree}"), ("status",)])
def test_every_command_refuses_a_bad_setting_in_one_line(monkeypatch, tmp_path, raw, argv):
    from support.badinput import MATRIX, one_line_error, run, tiny_patch, tiny_tree

    tree = tiny_tree(tmp_path / "src")
    (tmp_path / "patches").mkdir()
    tiny_patch(tmp_path / "patches")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORGEPATCH_LOCK_TIMEOUT", raw)
    res = run(*(a.format(tree=tree) for a in argv))
    assert res.rc == 2, res
    assert one_line_error(res).startswith("forgepatch: error: $FORGEPATCH_LOCK_TIMEOUT: "), res.err


def test_help_still_works_with_a_bad_setting(monkeypatch):
    from support.badinput import run

    monkeypatch.setenv("FORGEPATCH_PATCH_IMPORT_TIMEOUT", "abc")
    assert run("apply", "--help").rc == 0
