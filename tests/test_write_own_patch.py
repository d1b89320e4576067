"""Writing a patch of one's own (issue 15 item 5), on real release wheels: the README's "Write
your own patch" walk-through step by step (`init`, `patch new --from --function`, `patch test`,
the matrix, `apply`), the example keys (`path`, `context`, `fallback`) held to what the run did,
and failure messages that say what is wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

from forgepatch.paths import SHIPPED_PATCHES
from tests.support.cli import assert_one_line_error, forgepatch

ROOT = Path(__file__).resolve().parents[1]
ID = "inkling-fa4-sm120"
FILE = "srt/arg_groups/model_overrides/inkling.py"


def _readme_walkthrough() -> list[str]:
    """The commands of the README's walk-through, in order (the test follows them)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Write your own patch"):]
    section = section[: section.index("\n## ", 5)]
    block = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.split("  #")[0].strip() for b in block for line in b.splitlines()
            if line.strip().startswith("forgepatch ")]


def test_the_readme_walkthrough_end_to_end(tmp_path):
    steps = _readme_walkthrough()
    assert [s.split()[1] for s in steps] == ["init", "patch", "patch", "apply", "apply", "apply"], steps
    # 1. init
    assert steps[0] == "forgepatch init"
    run = forgepatch("init", cwd=tmp_path)
    assert run.rc == 0, run.err
    # 2. patch new, from the real function of the real release
    new = steps[1].split()[1:]
    assert new == ["patch", "new", ID, "--arch", "sm120", "--from", "pypi:0.5.23", "--function", "_inkling_overrides"]
    run = forgepatch(*new, cwd=tmp_path)
    assert run.rc == 0, run.err
    path = tmp_path / "patches" / f"{ID}.toml"
    assert f"wrote {Path('patches') / (ID + '.toml')} from _inkling_overrides (pypi:0.5.23 {FILE}:20)" in run.out
    assert "forgepatch patch test " + ID in run.out  # the next step is said
    text = path.read_text()
    assert f'modules = ["{FILE}"]' in text and 'functions = ["_inkling_overrides"]' in text
    import tomllib

    ex = tomllib.loads(text)["examples"][0]
    assert ex["path"] == FILE and "fallback" not in ex  # 0.5.23 provides is_sm120: no fallback
    from forgepatch.sources import pypi_tree

    real_text = (pypi_tree("0.5.23").package / FILE).read_text()
    fn = real_text[real_text.index("def _inkling_overrides("):]
    assert fn.split("\n\n\n")[0].rstrip() in ex["before"]  # the function as the release has it
    assert "get_platform().is_sm90 or get_platform().is_sm100:" in ex["before"]
    assert "get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120:" in ex["after"]
    assert "srt/runtime_context.py" in ex["context"], ex["context"]
    assert "def get_platform(" in ex["context"]["srt/runtime_context.py"]
    # 3. patch test runs the example
    assert steps[2] == f"forgepatch patch test {ID}"
    run = forgepatch("patch", "test", ID, cwd=tmp_path)
    assert run.rc == 0 and run.out.startswith(f"ok   {ID}: "), (run.out, run.err)
    # 4. the matrix lists it for sm120 (as the README says), apply checks then writes
    # the README's matrix edit, then its two apply commands
    readme = (ROOT / "README.md").read_text()
    assert f'patches = ["sm120-flashinfer-allreduce-fusion", "{ID}"]' in readme
    assert steps[3:] == ["forgepatch apply --arch sm120 --check", "forgepatch apply --arch sm120 --diff",
                         "forgepatch apply --arch sm120 --accept --out patched/"]
    matrix = tmp_path / "matrix.toml"
    old = '[arches.sm120]\npatches = ["sm120-flashinfer-allreduce-fusion"]'
    assert old in matrix.read_text()
    matrix.write_text(matrix.read_text().replace(old, old[:-1] + f', "{ID}"]'))
    run = forgepatch("apply", "--arch", "sm120", "--check", "--json", cwd=tmp_path)
    assert run.rc == 1, run.err  # the release needs patching, and nobody accepted the new patch yet
    mine = next(p for p in run.json()["patches"] if p["patch"] == ID)
    sites = {s["site"]: s for s in mine["sites"]}
    assert mine["status"] == "review" and mine["files"] == [FILE], mine
    lock = sites.pop("edit-lock")
    assert lock["detail"].startswith(f"no lock ({ID}.lock): nobody accepted this patch's edits"), lock
    assert [loc["file"] for loc in lock["locations"]] == [FILE], lock  # the edit is listed, file:line
    assert {s["status"] for s in sites.values()} == {"applied"}, sites
    assert run.json()["verified"] is True
    lock_file = tmp_path / "patches" / f"{ID}.lock"
    run = forgepatch("apply", "--arch", "sm120", "--diff", cwd=tmp_path)
    added = [ln for ln in run.out.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert run.rc == 1 and any(ln.endswith("get_platform().is_sm100 or get_platform().is_sm120:") for ln in added), run.out
    assert not lock_file.exists()  # reading the diff accepts nothing
    run = forgepatch("apply", "--arch", "sm120", "--accept", "--out", "patched/", cwd=tmp_path)
    assert run.rc == 0, run.err
    assert "sm120@0.5.23" in lock_file.read_text() and "get_platform().is_sm120" in lock_file.read_text()
    patched = (tmp_path / "patched" / "sglang" / FILE).read_text()
    assert "if get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120:" in patched
    listed = forgepatch("patch", "list", "--json", cwd=tmp_path)
    assert {d["id"]: d["origin"] for d in listed.json()}[ID] == "user"


def test_an_example_of_a_release_without_the_predicate_says_fallback(tmp_path):
    """0.5.3 lacks is_sm120_supported: the scaffolded example is a declared fallback; without
    the declaration, `patch test` says the example's tree lacks the predicate."""
    run = forgepatch("patch", "new", "old-fusion", "--arch", "sm120", "--from", "pypi:0.5.3", "--function",
                     "_gather_hidden_states_and_residual", "--json", cwd=tmp_path)
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["fallback"] is True and doc["example_changes"] is True and doc["file"] == "srt/layers/communicator.py"
    path = tmp_path / "patches" / "old-fusion.toml"
    assert forgepatch("patch", "test", "old-fusion", cwd=tmp_path).rc == 0
    path.write_text(path.read_text().replace("fallback = true\n", ""))
    run = forgepatch("patch", "test", "old-fusion", cwd=tmp_path)
    assert run.rc == 1 and run.out.startswith("FAIL old-fusion"), run.out
    assert "fell back to a local helper: no file of this example's tree provides the new predicate" in run.out
    assert "set `fallback = true`" in run.out


def _user_patch(tmp_path: Path, examples: str) -> None:
    """A copy of the shipped sm120 patch under a new id, with the given examples."""
    text = (SHIPPED_PATCHES / "sm120-flashinfer-allreduce-fusion.toml").read_text()
    text = text.replace('id = "sm120-flashinfer-allreduce-fusion"', 'id = "mine"')
    text = text[: text.index("[[examples]]")] + examples
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "mine.toml").write_text(text)


BEFORE = """
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def _resolve_backend(backend, is_multi_node=False):
    if not (is_sm90_supported() or is_sm100_supported()):
        raise ValueError("FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.")
    return "trtllm"
"""
AFTER = BEFORE.replace("import is_sm90_supported, is_sm100_supported",
                       "import is_sm90_supported, is_sm100_supported, is_sm120_supported").replace(
    "is_sm100_supported()):", "is_sm100_supported() or is_sm120_supported()):")
UTILS = "def is_sm90_supported(): ...\\ndef is_sm100_supported(): ...\\ndef is_sm120_supported(): ...\\n"


def _example(name: str, *, after: str | None = AFTER, context: bool = True, fallback: bool = False) -> str:
    lines = ["[[examples]]", f'name = "{name}"', 'path = "srt/layers/flashinfer_comm_fusion.py"']
    if context:
        lines.append(f'context = {{ "srt/utils.py" = "{UTILS}" }}')
    if fallback:
        lines.append("fallback = true")
    lines.append(f"before = '''{BEFORE}'''")
    if after is not None:
        lines.append(f"after = '''{after}'''")
    return "\n".join(lines) + "\n\n"


def test_example_failures_say_what_is_wrong(tmp_path):
    _user_patch(tmp_path, _example("with context") + _example("no context", context=False)
                + _example("no after", after=None) + _example("wrong after", after=AFTER.replace("trtllm", "mnnvl"))
                + _example("claims fallback", fallback=True))
    run = forgepatch("patch", "test", "mine", cwd=tmp_path)
    assert run.rc == 1
    blocks = {m.group(2): m.group(3) for m in re.finditer(r"^(ok  |FAIL) mine: (.+)\n((?:(?!ok   |FAIL ).*\n)*)",
                                                            run.out, re.M)}
    assert re.search(r"^ok   mine: with context$", run.out, re.M), run.out
    # no `context`: the run fell back to a local helper, which the example does not declare
    assert "fell back to a local helper" in blocks["no context"] and "`context`" in blocks["no context"]
    # no `after`: says the example expects no change, and shows the change
    assert blocks["no after"].startswith("expected no change (this example has no `after`: "
                                         "srt/layers/flashinfer_comm_fusion.py must stay as `before`)")
    assert "+    if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):" in blocks["no after"]
    assert "output differs from 'after'" not in run.out
    assert blocks["wrong after"].startswith("srt/layers/flashinfer_comm_fusion.py differs from `after`")
    assert blocks["claims fallback"].startswith("`fallback = true`, but the run did not fall back")


def test_patch_new_refuses_what_it_cannot_do_well(tmp_path):
    assert_one_line_error(forgepatch("patch", "new", "sm103-ep-cuda-graph-guard", "--arch", "sm103", cwd=tmp_path),
                          2, "'sm103-ep-cuda-graph-guard' is a shipped patch; pick another id")
    assert_one_line_error(forgepatch("patch", "new", "Bad_ID", "--arch", "sm120", cwd=tmp_path), 2, "must be lower-case")
    assert_one_line_error(forgepatch("patch", "new", "x", "--arch", "sm120", "--from", "pypi:0.5.23", "--function",
                                     "no_such_function_here", cwd=tmp_path),
                          2, "--function: no function 'no_such_function_here' in pypi:0.5.23")
    run = forgepatch("patch", "new", "x", "--arch", "sm120", "--from", "pypi:0.5.23", "--function", "_resolve_backend",
                     cwd=tmp_path)
    assert_one_line_error(run, 2, "2 functions named '_resolve_backend'", "srt/distributed/bootstrap.py:",
                          "srt/layers/flashinfer_comm_fusion.py:", "--module")
    assert not (tmp_path / "patches" / "x.toml").exists()
    # a skeleton without --function loads and has nothing to test yet; a second one is refused
    assert forgepatch("patch", "new", "x", "--arch", "sm121", cwd=tmp_path).rc == 0
    listed = forgepatch("patch", "list", "--json", cwd=tmp_path)
    assert {d["id"]: (d["origin"], d["arches"]) for d in listed.json()}["x"] == ("user", ["sm121"])
    assert_one_line_error(forgepatch("patch", "new", "x", "--arch", "sm121", cwd=tmp_path), 2, "already a patch")
    assert json.loads(forgepatch("patch", "list", "--json", cwd=tmp_path).out)  # still loads
