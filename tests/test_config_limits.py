"""Numbers, strings and line numbers of matrix.toml / patch TOML (issue 27 item 6, issue 28
item 4): a huge literal is ``file:line: key: number too large``; the line-number scan is
linear (its regexes backtracked quadratically: minutes on a long run of spaces)."""

from __future__ import annotations

import time

import pytest

from forgepatch.config import load_matrix
from forgepatch.infra.tomlfile import MAX_STRING, key_line
from forgepatch.errors import BadInput
from support.badinput import MATRIX


@pytest.mark.parametrize("literal", ["1" + "0" * 5000, "0x" + "f" * 5000, "0o" + "7" * 3000, "0b" + "1" * 9000,
                                     "9223372036854775808", "-9223372036854775809"])
def test_a_huge_integer_is_number_too_large_at_its_line(tmp_path, literal):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text(MATRIX.replace("gpus = 1", f"gpus = {literal}"))
    with pytest.raises(BadInput) as err:
        load_matrix(cfg)
    assert str(err.value) in (f"{cfg}:12: profiles.probe.gpus: number too large", f"{cfg}:12: gpus: number too large")


def test_the_largest_toml_integer_is_still_read(tmp_path):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text(MATRIX.replace("gpus = 1", "gpus = 9223372036854775807"))
    with pytest.raises(BadInput, match=r":12: profiles\.probe\.gpus: (?!number too large)"):
        load_matrix(cfg)  # refused by the setting's own range, not by the size limit


def test_a_huge_string_is_refused_at_its_line(tmp_path):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text(MATRIX.replace('"forgepatch-test/tiny"', '"' + "x" * (MAX_STRING + 1) + '"'))
    with pytest.raises(BadInput, match=r":16: smoke\.image_repo: string too long"):
        load_matrix(cfg)


def test_a_huge_integer_in_a_patch_names_the_patch_file(tmp_path):
    from support.badinput import PATCH_TOML, one_line_error, run, tiny_tree

    src = tiny_tree(tmp_path / "src")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "tiny-gate.toml").write_text(PATCH_TOML.replace("required = true",
                                                                            "required = true\nlone = " + "9" * 5000))
    (tmp_path / "matrix.toml").write_text(MATRIX)
    res = run("--config", tmp_path / "matrix.toml", "--patches", tmp_path / "patches", "apply", "--arch", "sm120",
              "--source", src, "--check")
    line = one_line_error(res)
    assert res.rc == 2 and "tiny-gate.toml:" in line and "number too large" in line, line


@pytest.mark.parametrize("line", ["[ " + " " * 200_000 + "x", "a" + " " * 200_000 + "x", "[a" + " " * 200_000 + "x"])
def test_the_line_number_scan_is_linear(line):
    start = time.monotonic()
    assert key_line(line + "\nx = 1\n", ("x",)) == 2
    assert time.monotonic() - start < 1.0


def test_a_config_error_after_a_long_run_of_spaces_is_quick(tmp_path):
    cfg = tmp_path / "matrix.toml"
    cfg.write_text(MATRIX + "# pad\n" + "a" + " " * 200_000 + "= 1\n" + "bogus = 1\n")
    start = time.monotonic()
    with pytest.raises(BadInput, match=r":21: release\.a: unknown key"):
        load_matrix(cfg)
    assert time.monotonic() - start < 2.0
