"""The README's "Write your own patch: widen, narrow, value, guard" walk-through, executed: its
patches (the ```toml blocks with an `id`) go into a fork's `patches/`, its matrix block into
`matrix.toml`, every patch passes `patch test`, and each `forgepatch apply ... --diff` it shows
prints the lines of the ```diff block after it, on the real release wheel."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.support.cli import forgepatch

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Write your own patch: widen, narrow, value, guard")
    return text[start: text.index("\n## ", start + 5)]


def _blocks(section: str) -> list[tuple[str, str]]:
    return re.findall(r"```(toml|bash|diff)\n(.*?)```", section, re.S)


def test_the_kinds_walkthrough_runs_as_written(tmp_path):
    blocks = _blocks(_section())
    assert forgepatch("init", cwd=tmp_path).rc == 0
    patches = [tomllib.loads(body) for kind, body in blocks if kind == "toml" and "\nid = " in "\n" + body]
    kinds = {p.get("codemod", "arch-gate") for p in patches}
    assert kinds == {"arch-gate", "narrow", "value", "guard"}, kinds
    for p, (kind, body) in zip(patches, [b for b in blocks if b[0] == "toml" and "\nid = " in "\n" + b[1]]):
        (tmp_path / "patches" / f"{p['id']}.toml").write_text(body)
        # "`ID.toml` and `ID.lock`": the README's patch is the example's, and so is its lock
        example = ROOT / "docs" / "examples" / "patches" / f"{p['id']}.toml"
        assert {k: v for k, v in tomllib.loads(example.read_text()).items() if k != "examples"} == p, p["id"]
        (tmp_path / "patches" / f"{p['id']}.lock").write_text(example.with_suffix(".lock").read_text())
    matrix = next(tomllib.loads(body) for kind, body in blocks if kind == "toml" and body.startswith("[arches."))
    text = (tmp_path / "matrix.toml").read_text()
    for arch, table in matrix["arches"].items():
        listed = ", ".join(f'"{x}"' for x in table["patches"])
        text, n = re.subn(rf"(\[arches\.{arch}\]\n(?:#.*\n)*patches = )\[[^\]]*\]", rf"\g<1>[{listed}]", text)
        assert n == 1, arch
    (tmp_path / "matrix.toml").write_text(text)
    r = forgepatch("patch", "test", *[p["id"] for p in patches], cwd=tmp_path)
    assert r.rc == 0, r.out + r.err
    # each apply shown, then the diff lines shown after it
    shown = 0
    for i, (kind, body) in enumerate(blocks):
        if kind != "bash":
            continue
        cmd = body.strip().split()
        assert cmd[:2] == ["forgepatch", "apply"] and "--diff" in cmd, cmd
        run = forgepatch(*cmd[1:], cwd=tmp_path)
        assert run.rc == 0, run.out + run.err
        diff_kind, diff = blocks[i + 1]
        assert diff_kind == "diff"
        got = run.out.splitlines()
        for line in diff.splitlines():
            assert line in got, (cmd, line)
        shown += 1
    assert shown == 3
