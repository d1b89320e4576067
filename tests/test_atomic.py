"""Atomic writes: never half-written, modes kept, validation before replacement."""

from __future__ import annotations

import os
import stat

import pytest

from forgepatch.infra.atomic import write_atomic


def test_new_file_gets_the_umask_default_and_existing_modes_are_kept(tmp_path):
    old = os.umask(0o022)
    try:
        target = tmp_path / "report.md"
        write_atomic(target, "a")
        assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's 0600
        target.chmod(0o600)
        write_atomic(target, "b")
        assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "b"
    finally:
        os.umask(old)


def test_rejected_content_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "matrix.toml"
    target.write_text("old")

    def refuse(path):
        assert path.read_text() == "new"
        raise ValueError("bad")

    with pytest.raises(ValueError):
        write_atomic(target, "new", validate=refuse)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["matrix.toml"]


def test_exclusive_never_overwrites(tmp_path):
    target = tmp_path / "f"
    write_atomic(target, b"1", exclusive=True, durable=True)
    with pytest.raises(FileExistsError):
        write_atomic(target, b"2", exclusive=True)
    assert target.read_bytes() == b"1" and len(list(tmp_path.iterdir())) == 1
