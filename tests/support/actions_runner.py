"""Runs a GitHub Actions workflow's jobs here, the way a runner runs them: jobs in `needs`
order, each in a fresh workspace, `run:` steps as bash with the workflow's shell options
(GitHub's command lines: `shell: bash` is `bash --noprofile --norc -eo pipefail {0}`, no
shell is `bash -e {0}`), env from the workflow, job and step, `$GITHUB_OUTPUT`, `$GITHUB_ENV`
and `$GITHUB_STEP_SUMMARY` files, `${{ }}` expressions, `if:` conditions, matrices and job
outputs.

Test doubles (named; the real ones need GitHub): `actions/checkout` is `git init` + `git fetch`
from the remote the test gives (depth 1 of the branch, or with `fetch-depth: 0` every branch
as origin/* and every tag, as checkout@v4 does); `actions/setup-python` adds nothing (the
test's Python is on PATH); `docker/login-action` does nothing (the local registry needs no
login); `upload-artifact`/`download-artifact` copy to and from a directory of this run.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHELLS = {"bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"], None: ["bash", "-e"]}


class StepFailed(AssertionError):
    pass


# -- expressions ------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!()\[\],.])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot parse expression {text!r} at {pos}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, "", [], {})


class _Parser:
    def __init__(self, text: str, ctx: dict[str, Any]):
        self.toks, self.i, self.ctx = _tokens(text), 0, ctx

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self):
        v = self.or_()
        if self.i != len(self.toks):
            raise ValueError(f"trailing tokens {self.toks[self.i:]}")
        return v

    def or_(self):
        v = self.and_()
        while self.peek()[1] == "||":
            self.take()
            w = self.and_()
            v = v if _truthy(v) else w
        return v

    def and_(self):
        v = self.cmp()
        while self.peek()[1] == "&&":
            self.take()
            w = self.cmp()
            v = w if _truthy(v) else v
        return v

    def cmp(self):
        v = self.unary()
        while self.peek()[1] in ("==", "!="):
            op = self.take()[1]
            w = self.unary()
            same = (str(v).lower() == str(w).lower()) if isinstance(v, str) or isinstance(w, str) else v == w
            v = same if op == "==" else not same
        return v

    def unary(self):
        if self.peek()[1] == "!":
            self.take()
            return not _truthy(self.unary())
        return self.primary()

    def primary(self):
        kind, val = self.take()
        if val == "(":
            v = self.or_()
            self.take(")")
            return v
        if kind == "str":
            return val[1:-1].replace("''", "'")
        if kind == "num":
            return float(val) if "." in val else int(val)
        if kind != "name":
            raise ValueError(f"unexpected {val!r}")
        if val in ("true", "false"):
            return val == "true"
        if val == "null":
            return None
        if self.peek()[1] == "(":
            self.take("(")
            args = []
            while self.peek()[1] != ")":
                args.append(self.or_())
                if self.peek()[1] == ",":
                    self.take()
            self.take(")")
            return self.call(val, args)
        v = self.ctx.get(val)
        while self.peek()[1] in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            v = v.get(key) if isinstance(v, dict) else (v[key] if isinstance(v, list) and isinstance(key, int) else None)
        return v

    def call(self, name: str, args: list[Any]):
        name = name.lower()
        if name == "fromjson":
            return json.loads(args[0])
        if name == "tojson":
            return json.dumps(args[0])
        if name == "format":
            return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))]), args[0])
        if name == "contains":
            return args[1] in args[0]
        if name in ("always",):
            return True
        if name == "success":
            return not self.ctx.get("__failed__")
        if name == "failure":
            return bool(self.ctx.get("__failed__"))
        if name == "cancelled":
            return False
        raise ValueError(f"function {name} not supported by this runner")


def evaluate(text: str, ctx: dict[str, Any]) -> Any:
    return _Parser(text, ctx).parse()


_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def interpolate(value: Any, ctx: dict[str, Any]) -> Any:
    """``${{ }}`` in a string (a whole-string expression keeps its type)."""
    if not isinstance(value, str):
        return value
    m = _EXPR.fullmatch(value.strip())
    if m:
        return evaluate(m.group(1), ctx)
    return _EXPR.sub(lambda m: _as_text(evaluate(m.group(1), ctx)), value)


def _as_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def condition(text: Any, ctx: dict[str, Any]) -> bool:
    if text is None:
        return not ctx.get("__failed__")
    text = str(text).strip()
    m = _EXPR.fullmatch(text)
    expr = m.group(1) if m else text
    if not re.search(r"\b(always|success|failure|cancelled)\(", expr) and ctx.get("__failed__"):
        return False  # GitHub adds success() unless a status function is named
    return _truthy(evaluate(expr, ctx))


# -- the runner -------------------------------------------------------------------------------
@dataclass
class JobRun:
    job: str
    matrix: dict[str, Any]
    status: str = "success"  # success | failure | skipped
    outputs: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    workspace: Path | None = None


@dataclass
class Runner:
    """One workflow run (an event on a branch)."""

    workflow: dict[str, Any]
    remote: str  # the repository URL (a bare repo path here)
    root: Path  # this run's scratch directory
    base_env: dict[str, str]
    event: str = "schedule"
    ref_name: str = "main"
    vars: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: str(uuid.uuid4().int % 10**9))
    runs: dict[str, list[JobRun]] = field(default_factory=dict)

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def github(self) -> dict[str, Any]:
        return {"event_name": self.event, "ref_name": self.ref_name, "ref": f"refs/heads/{self.ref_name}",
                "actor": "forgepatch-test", "run_id": self.run_id, "repository": "fork/sglang"}

    def order(self) -> list[str]:
        jobs = self.workflow["jobs"]
        done: list[str] = []
        while len(done) < len(jobs):
            for name, job in jobs.items():
                needs = job.get("needs") or []
                needs = [needs] if isinstance(needs, str) else needs
                if name not in done and all(n in done for n in needs):
                    done.append(name)
        return done

    def run(self, only: list[str] | None = None) -> dict[str, list[JobRun]]:
        for name in self.order():
            if only is None or name in only:
                self.runs[name] = self.run_job(name)
        return self.runs

    def needs_ctx(self, job: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        needs = job.get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        ctx, failed = {}, False
        for n in needs:
            runs = self.runs.get(n, [])
            result = ("failure" if any(r.status == "failure" for r in runs)
                      else "skipped" if not runs or all(r.status == "skipped" for r in runs) else "success")
            outputs: dict[str, str] = {}
            for r in runs:  # a matrix job's outputs: one of its runs' (GitHub: the last one to finish)
                outputs.update({k: v for k, v in r.outputs.items() if v})
            ctx[n] = {"result": result, "outputs": outputs}
            failed |= result != "success"
        return ctx, failed

    def base_ctx(self) -> dict[str, Any]:
        return {"github": self.github(), "vars": self.vars, "inputs": self.inputs, "secrets": {},
                "runner": {"os": "Linux"}}

    def run_job(self, name: str) -> list[JobRun]:
        job = self.workflow["jobs"][name]
        needs, failed = self.needs_ctx(job)
        ctx = {**self.base_ctx(), "needs": needs, "__failed__": failed}
        ctx["env"] = {k: _as_text(interpolate(v, ctx)) for k, v in (self.workflow.get("env") or {}).items()}
        if not condition(job.get("if"), ctx):
            return [JobRun(name, {}, "skipped")]
        strategy = (job.get("strategy") or {}).get("matrix")
        combos: list[dict[str, Any]] = [{}]
        if strategy is not None:
            m = interpolate(strategy, ctx)
            m = {k: interpolate(v, ctx) for k, v in m.items()}
            include = m.pop("include", None) or []
            m.pop("exclude", None)
            keys = list(m)
            combos = [dict(zip(keys, vals)) for vals in itertools.product(*(m[k] for k in keys))] if keys else []
            combos += list(include)
        return [self.run_one(name, job, {**ctx, "matrix": combo}) for combo in combos]

    def run_one(self, name: str, job: dict[str, Any], ctx: dict[str, Any]) -> JobRun:
        run = JobRun(name, ctx["matrix"])
        tag = "-".join(str(v) for v in ctx["matrix"].values())[:60]
        ws = self.root / "jobs" / f"{name}-{tag or 'one'}-{uuid.uuid4().hex[:6]}"
        home = ws / "_runner"
        home.mkdir(parents=True)
        work = ws / "work"
        work.mkdir()
        run.workspace = work
        env = dict(self.base_env)
        env.update({"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_EVENT_NAME": self.event,
                    "GITHUB_REF_NAME": self.ref_name, "GITHUB_REF": f"refs/heads/{self.ref_name}",
                    "GITHUB_RUN_ID": self.run_id, "GITHUB_WORKSPACE": str(work), "RUNNER_TEMP": str(home)})
        env.update(ctx["env"])
        job_env = {k: _as_text(interpolate(v, ctx)) for k, v in (job.get("env") or {}).items()}
        env.update(job_env)
        ctx = {**ctx, "env": {**ctx["env"], **job_env}, "steps": {}, "__failed__": False}
        shell = ((job.get("defaults") or {}).get("run") or {}).get("shell") or \
            ((self.workflow.get("defaults") or {}).get("run") or {}).get("shell")
        for i, step in enumerate(job["steps"]):
            if not condition(step.get("if"), ctx):
                run.logs.append(f"step {i} skipped")
                continue
            step_env = {k: _as_text(interpolate(v, ctx)) for k, v in (step.get("env") or {}).items()}
            ok, outputs = True, {}
            try:
                if "uses" in step:
                    with_ = {k: interpolate(v, ctx) for k, v in (step.get("with") or {}).items()}
                    self.action(step["uses"], with_, work, env, run)
                else:
                    outputs, new_env = self.run_step(interpolate(step["run"], ctx), step.get("shell") or shell,
                                                     {**env, **step_env}, work, home, run, i)
                    env.update(new_env)
            except StepFailed as exc:
                ok = False
                run.logs.append(str(exc))
            if step.get("id"):
                ctx["steps"][step["id"]] = {"outputs": outputs, "outcome": "success" if ok else "failure"}
            if not ok:
                run.status, ctx["__failed__"] = "failure", True
        run.outputs = {k: _as_text(interpolate(v, ctx)) for k, v in (job.get("outputs") or {}).items()}
        return run

    def run_step(self, script: str, shell: str | None, env: dict[str, str], work: Path, home: Path,
                 run: JobRun, index: int) -> tuple[dict[str, str], dict[str, str]]:
        files = {n: home / f"{n.lower()}-{index}" for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")}
        for f in files.values():
            f.write_text("")
        path = home / f"step-{index}.sh"
        path.write_text(script)
        cmd = [*SHELLS[shell], str(path)]
        proc = subprocess.run(cmd, cwd=work, env={**env, **{k: str(v) for k, v in files.items()}},
                              capture_output=True, text=True, timeout=900)
        run.logs.append(f"$ {script.strip()}\n{proc.stdout}{proc.stderr}[exit {proc.returncode}]")
        if proc.returncode != 0:
            raise StepFailed(f"{run.job} {run.matrix}: step {index} exited {proc.returncode}:\n{script}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
        return _key_values(files["GITHUB_OUTPUT"].read_text()), _key_values(files["GITHUB_ENV"].read_text())

    # -- the actions (test doubles, see the module docstring) --------------------------------
    def action(self, uses: str, with_: dict[str, Any], work: Path, env: dict[str, str], run: JobRun) -> None:
        name = uses.split("@")[0]
        if name == "actions/checkout":
            self.checkout(work, env, int(with_.get("fetch-depth", 1)))
        elif name in ("actions/setup-python", "docker/login-action"):
            return
        elif name == "actions/upload-artifact":
            self.upload(work, str(with_["name"]), str(with_["path"]), with_.get("if-no-files-found", "warn"))
        elif name == "actions/download-artifact":
            self.download(work, with_)
        else:
            raise StepFailed(f"action {uses} not supported by this runner")

    def checkout(self, work: Path, env: dict[str, str], depth: int) -> None:
        def git(*args):
            p = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True, text=True)
            if p.returncode:
                raise StepFailed(f"checkout: git {' '.join(args)}: {p.stderr}")

        git("init", "-q")
        git("remote", "add", "origin", self.remote)
        branch = self.ref_name
        if depth == 0:
            git("fetch", "-q", "--prune", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*",
                "+refs/tags/*:refs/tags/*")
        else:
            git("fetch", "-q", "--no-tags", f"--depth={depth}", "origin",
                f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
        git("checkout", "-q", "--force", "-B", branch, f"refs/remotes/origin/{branch}")

    def upload(self, work: Path, name: str, paths: str, if_none: str) -> None:
        dest = self.artifacts / name
        if dest.exists():
            raise StepFailed(f"upload-artifact: an artifact named {name} exists already")
        found = []
        for pattern in filter(None, (p.strip() for p in paths.splitlines())):
            found += [p for p in work.glob(pattern.rstrip("/")) if p.exists()]
        if not found:
            if if_none == "error":
                raise StepFailed(f"upload-artifact {name}: no files at {paths!r}")
            return
        for p in found:
            rel = p.relative_to(work)
            if p.is_dir():
                shutil.copytree(p, dest / rel, dirs_exist_ok=True)
            else:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest / rel)

    def download(self, work: Path, with_: dict[str, Any]) -> None:
        target = work / str(with_.get("path") or ".")
        if with_.get("name"):
            src = self.artifacts / str(with_["name"])
            if not src.is_dir():
                raise StepFailed(f"download-artifact: no artifact {with_['name']}")
            shutil.copytree(src, target, dirs_exist_ok=True)
            return
        pattern = str(with_.get("pattern") or "*")
        merge = str(with_.get("merge-multiple", "false")).lower() == "true"
        for art in sorted(self.artifacts.glob("*")):
            if fnmatch.fnmatch(art.name, pattern):
                shutil.copytree(art, target if merge else target / art.name, dirs_exist_ok=True)


def _key_values(text: str) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` / ``$GITHUB_ENV``: ``k=v`` lines and ``k<<DELIM`` blocks."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            body = []
            i += 1
            while i < len(lines) and lines[i] != delim:
                body.append(lines[i])
                i += 1
            out[key] = "\n".join(body)
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out
