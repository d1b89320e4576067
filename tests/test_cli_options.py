"""One CLI style (issue 25): the shared options mean one thing in every command, read off the
real command tree: ``--json`` and ``--markdown`` are flags (printing to stdout), a Markdown
FILE is ``--markdown-out``; ``--repo``, ``--ledger``, ``--pin`` and ``--image`` take a value;
each comes from its factory in ``cli/_options.py`` (one parameter name per flag). The old
spelling ``--markdown FILE`` still works for one release, hidden, with a note on stderr."""

from __future__ import annotations

import json

import pytest

from support.badinput import run
from support.smoke_matrix import profile, run_cli, write_matrix

VALUED = {"--repo": "repo", "--ledger": "ledger", "--pin": "pin", "--image": "image", "--markdown-out": "markdown"}


def _commands():
    from typer.main import get_command

    from forgepatch.cli import app

    todo = [("forgepatch", get_command(app))]
    while todo:
        path, cmd = todo.pop()
        subs = getattr(cmd, "commands", None)
        if subs:
            todo += [(f"{path} {name}", sub) for name, sub in subs.items()]
        else:
            yield path, cmd


def test_every_shared_flag_has_one_meaning_and_one_name():
    seen = set()
    for path, cmd in _commands():
        for param in cmd.params:
            opts = set(getattr(param, "opts", [])) | set(getattr(param, "secondary_opts", []))
            where = f"{path} {'/'.join(sorted(opts))}"
            if "--json" in opts:
                assert param.is_flag and param.name == "as_json", where
            if "--markdown" in opts and not param.hidden:
                assert param.is_flag and param.name == "markdown", where
            if "--markdown" in opts and param.hidden:  # the old spelling of --markdown-out
                assert not param.is_flag and param.name == "markdown_old", where
                assert any("--markdown-out" in p.opts for p in cmd.params), where
            for flag, name in VALUED.items():
                if flag in opts:
                    assert not param.is_flag and param.name == name, where
                    seen.add(flag)
    assert seen == set(VALUED)


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A real `forgepatch smoke --json` document (one command job, local runner)."""
    tmp = tmp_path_factory.mktemp("options")
    config = write_matrix(tmp / "matrix.toml", {"cmd": profile("cmd", kind="command", command="sh -c 'echo ran'")},
                          sm120=["cmd"])
    r = run_cli("--config", config, "smoke", "--runner", "local", "--json", "--logs", tmp / "logs")
    assert r.returncode == 0, r.stderr
    (tmp / "shard.json").write_text(r.stdout)
    return tmp / "shard.json"


def test_the_old_markdown_file_spelling_still_writes_with_a_note(shard, tmp_path):
    new = run("results", "merge", shard, "--out", tmp_path / "a.json", "--markdown-out", tmp_path / "a.md")
    assert new.rc == 0 and "deprecated" not in new.err, new.err
    old = run("results", "merge", shard, "--out", tmp_path / "b.json", "--markdown", tmp_path / "b.md")
    assert old.rc == 0, old.err
    assert "--markdown FILE is deprecated, use --markdown-out FILE" in old.err
    assert (tmp_path / "b.md").read_text() == (tmp_path / "a.md").read_text() != ""
    assert json.loads((tmp_path / "b.json").read_text())["jobs"]
    both = run("results", "merge", shard, "--out", tmp_path / "c.json", "--markdown", tmp_path / "c.md",
               "--markdown-out", tmp_path / "d.md")
    assert both.rc == 2 and len(both.lines) == 1 and "give --markdown-out only" in both.lines[0], both.err
    assert not (tmp_path / "c.json").exists()
