"""`forgepatch smoke --runner local` runs the pin's patched SGLang (issue 15 item 7): the real
0.5.23 wheel, patched for sm103 by the shipped guard, first on the job's PYTHONPATH (complete:
the wheel's non-Python files too), checked before launch; a pin the series does not hold on,
or an import hook that would load another sglang, is refused before anything starts; the
table reports the log's real error line, not "exit code 1"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.cli import WAIT_NOTICE
from support.smoke_matrix import run_cli

GUARD = "_forgepatch_sm103_ep_graph_guard"
SM103 = "sm103-ep-cuda-graph-guard"

# the job: where does `import sglang` come from, and is it the patched, complete package?
PROBE_TREE = (
    "import importlib.util, pathlib, json; "
    "pkg = pathlib.Path(importlib.util.find_spec('sglang').submodule_search_locations[0]); "
    "hook = (pkg / 'srt/arg_groups/validation_hook.py').read_text(); "
    "print(json.dumps({'package': str(pkg), 'guard': '" + GUARD + "' in hook, "
    "'json_files': len(list(pkg.rglob('*.json')))}))"
)

MATRIX = """\
default_pin = "v0.5.23"

[pins."v0.5.23"]
pypi = "0.5.23"

[arches.sm103]
patches = ["sm103-ep-cuda-graph-guard"]
profiles = {profiles}

[smoke]
model = "/models/none"

[profiles.tree]
kind = "command"
command = {tree!r}
gpus = 0
timeout_s = 60

[profiles.server]
flags = ["--tp-size 1"]
gpus = 0
timeout_s = 120

[profiles.quota]
kind = "command"
command = "python3 -c \\"import sys; print('starting'); print('disk quota exceeded writing /scratch/out'); sys.exit(3)\\""
gpus = 0
timeout_s = 60
"""


def _matrix(tmp_path: Path, profiles: list[str]) -> Path:
    path = tmp_path / "matrix.toml"
    text = MATRIX.format(profiles=json.dumps(profiles), tree="__TREE__")
    path.write_text(text.replace("'__TREE__'", "'''python3 -c \"" + PROBE_TREE + "\"'''"))
    return path


def _smoke(tmp_path: Path, config: Path, *extra, pythonpath=()):
    return run_cli("--config", config, "smoke", "--runner", "local", "--json", "--logs", tmp_path / "logs", *extra,
                   cwd=tmp_path, pythonpath=pythonpath)


def _job_logs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "logs").rglob("*.log")) if (tmp_path / "logs").exists() else []


def test_sglang_jobs_run_on_the_pins_patched_complete_tree(tmp_path):
    # a decoy sglang first on the caller's PYTHONPATH: the job must not see it
    decoy = tmp_path / "decoy"
    (decoy / "sglang").mkdir(parents=True)
    (decoy / "sglang" / "__init__.py").write_text("raise ImportError('decoy sglang imported')\n")
    config = _matrix(tmp_path, ["tree", "quota"])
    r = _smoke(tmp_path, config, pythonpath=[decoy])
    assert r.returncode == 1, r.stderr  # the quota job fails (required): exit 1
    jobs = {j["profile"]: j for j in json.loads(r.stdout)["jobs"]}
    assert jobs["tree"]["status"] == "pass", jobs["tree"]
    log = Path(jobs["tree"]["log_path"]).read_text().splitlines()
    assert re.match(r"\[forgepatch\] local runner: sglang = (\S+)/sglang \(pypi:0\.5\.23 patched for sm103, "
                    r"patchset [0-9a-f]{16}, 1 file\(s\) changed\)$", log[0]), log[0]
    seen = json.loads(next(line for line in log if line.startswith("{")))
    assert seen["package"] == log[0].split(" = ")[1].split(" (")[0]  # the job imported that tree
    assert "local-trees" in seen["package"] and str(decoy) not in seen["package"]
    assert seen["guard"] is True  # patched: the sm103 guard is in validation_hook.py
    assert seen["json_files"] >= 600  # complete: the wheel's 638 JSON configs are there too
    # the patchset in the log is the one `apply` computes for the same arch and pin
    applied = run_cli("--config", config, "apply", "--arch", "sm103", "--check", "--json", cwd=tmp_path)
    assert json.loads(applied.stdout)["patchset"] in log[0]
    # a failure no signature names: the table shows the job's last words, not only "exit code 3"
    assert jobs["quota"]["signature"] == "exit" and jobs["quota"]["error_line"] == "disk quota exceeded writing /scratch/out"
    qlog = Path(jobs["quota"]["log_path"]).read_text().splitlines()
    assert qlog[0] == "[forgepatch] local runner: this job's command does not run sglang; environment unchanged"
    md = tmp_path / "table.md"
    run_cli("--config", config, "smoke", "--runner", "local", "--profile", "quota", "--logs", tmp_path / "logs2",
            "--markdown", md, cwd=tmp_path)
    assert "| **FAIL**: exit code 3: disk quota exceeded writing /scratch/out in start-up |" in md.read_text()


def test_server_job_reports_the_logs_real_error_line(tmp_path):
    """The real `python3 -m sglang.launch_server` of the patched 0.5.23 tree on this host: the
    cell names the import error the log shows (a dependency this host lacks), raised from the
    patched tree, where it used to say `exit code 1 in start-up`."""
    config = _matrix(tmp_path, ["server"])
    r = _smoke(tmp_path, config)
    assert r.returncode == 1, r.stderr
    job = json.loads(r.stdout)["jobs"][0]
    log = Path(job["log_path"]).read_text()
    if job["signature"] != "module-not-found":
        pytest.skip(f"SGLang's dependencies are importable here: the server failed otherwise ({job['summary']})")
    module = re.search(r"No module named '([\w.]+)'", job["label"]).group(1)
    assert module != "sglang"  # sglang itself is found: the pin's tree
    assert job["failing_phase"] == "start-up" and f"No module named '{module}'" in job["error_line"]
    assert re.search(r'File "[^"]*/local-trees/sm103-v0\.5\.23-[0-9a-f]+/sglang/', log), log[-2000:]
    assert "exit code" not in job["summary"]
    md = tmp_path / "table.md"
    run_cli("--config", config, "smoke", "--runner", "local", "--logs", tmp_path / "logs2", "--markdown", md,
            cwd=tmp_path)
    table = md.read_text()
    assert f"| **FAIL**: No module named '{module}' in start-up |" in table, table
    assert "install the missing package" in table  # the advice of the signature row


def test_refuses_before_launching_when_the_series_does_not_hold(tmp_path):
    from forgepatch.paths import SHIPPED_PATCHES

    mine = tmp_path / "patches"
    mine.mkdir()
    text = (SHIPPED_PATCHES / f"{SM103}.py").read_text()
    text = text.replace('"functions": ["check_server_args"]', '"functions": ["no_such_check_in_sglang"]')
    (mine / f"{SM103}.py").write_text(text)
    config = _matrix(tmp_path, ["tree", "quota"])
    r = _smoke(tmp_path, config)
    assert r.returncode == 1, (r.stdout, r.stderr)
    # a parallel test making the same wheel in the shared cache adds its wait notice: not an error line
    lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith(WAIT_NOTICE)]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "the sm103 patch series does not hold on pin v0.5.23" in lines[0] and "drift" in lines[0]
    assert "no job launched" in lines[0]
    assert _job_logs(tmp_path) == []  # not even the job that does not run sglang started


def test_refuses_when_an_import_hook_would_load_another_sglang(tmp_path):
    hook = tmp_path / "hook"
    (hook / "other" / "sglang").mkdir(parents=True)
    (hook / "other" / "sglang" / "__init__.py").write_text("")
    (hook / "sitecustomize.py").write_text(
        "import importlib.machinery, sys\n"
        "class _Other:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'sglang':\n"
        f"            return importlib.machinery.PathFinder.find_spec(name, [{str(hook / 'other')!r}])\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Other)\n"
    )
    config = _matrix(tmp_path, ["tree"])
    r = _smoke(tmp_path, config, pythonpath=[hook])
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"finds {hook / 'other' / 'sglang'}, not the pin's patched tree" in lines[0], lines[0]
    assert _job_logs(tmp_path) == []


# a job that imports flashinfer: which one, and does it hold the series' changes (the major-list
# codemod on jit/comm.py, the text patch on the .cu launcher)?
PROBE_FI = (
    "import importlib.util, pathlib, json; "
    "fi = pathlib.Path(importlib.util.find_spec('flashinfer').submodule_search_locations[0]); "
    "sg = pathlib.Path(importlib.util.find_spec('sglang').submodule_search_locations[0]); "
    "print(json.dumps({'flashinfer': str(fi), 'sglang': str(sg), "
    "'comm': 'supported_major_versions=[9, 10, 12]' in (fi / 'jit/comm.py').read_text(), "
    "'launcher': 'TVM_FFI_ICHECK(major == 10 || major == 12)' in "
    "(fi / 'data/csrc/trtllm_fused_moe_kernel_launcher.cu').read_text()}))"
)


def test_a_series_that_patches_flashinfer_runs_on_both_patched_packages(tmp_path):
    """Issue 23: the local tree carries every package the series patches (was: refused, exit 2):
    SGLang and the pin's FlashInfer, each patched, side by side first on the job's PYTHONPATH."""
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(Path(__file__).parent / "fixtures" / "packages", proj)
    matrix = proj / "matrix.toml"
    text = matrix.read_text().replace('[pins."v0.5.23".packages.flashinfer]\npypi = "0.7.2"',
                                      '[pins."v0.5.23".packages.flashinfer]\npypi = "0.6.1"')
    assert 'pypi = "0.6.1"' in text
    text = text.replace('[arches.sm120]\n', '[arches.sm120]\nprofiles = ["fi"]\n', 1)
    text += ('\n[smoke]\nmodel = "/models/none"\n\n[profiles.fi]\nkind = "command"\ngpus = 0\ntimeout_s = 60\n'
             "command = '''python3 -c \"" + PROBE_FI + "\"'''\n")
    matrix.write_text(text)
    # a decoy flashinfer on the caller's PYTHONPATH: the job must not see it
    decoy = tmp_path / "decoy"
    (decoy / "flashinfer").mkdir(parents=True)
    (decoy / "flashinfer" / "__init__.py").write_text("raise ImportError('decoy flashinfer imported')\n")
    r = _smoke(tmp_path, matrix, "--arch", "sm120", pythonpath=[decoy])
    assert r.returncode == 0, r.stderr[-3000:]
    [job] = json.loads(r.stdout)["jobs"]
    log = Path(job["log_path"]).read_text().splitlines()
    m = re.match(r"\[forgepatch\] local runner: sglang = (\S+)/sglang \(pypi:0\.5\.23 patched for sm120, patchset "
                 r"[0-9a-f]{16}, \d+ file\(s\) changed\); flashinfer = (\S+)/flashinfer "
                 r"\(pypi:flashinfer-python==0\.6\.1 patched for sm120, patchset [0-9a-f]{16}, 3 file\(s\) changed\)$",
                 log[0])
    assert m and m[1] == m[2], log[0]
    seen = json.loads(next(line for line in log if line.startswith("{")))
    assert seen == {"flashinfer": f"{m[1]}/flashinfer", "sglang": f"{m[1]}/sglang", "comm": True, "launcher": True}
    # a pin that names no FlashInfer release: refused before anything runs (one line, exit 2)
    matrix.write_text(text.replace('[pins."v0.5.23".packages.flashinfer]\npypi = "0.6.1"\n', ""))
    r = _smoke(tmp_path, matrix, "--arch", "sm120", "--logs", tmp_path / "logs-nopin")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith(WAIT_NOTICE)]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert ("smoke --runner local: the sm120 series patches flashinfer (patch fi-jit-majors), and pin 'v0.5.23' "
            "names no version of it") in lines[0]
