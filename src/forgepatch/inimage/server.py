"""SGLang server tier: launch a server with a profile's flag groups, wait for Ready, ask once, stop.

Runs where the server runs (inside the image, network ``none`` is fine: everything is on
127.0.0.1), stdlib only::

    python3 -m forgepatch.inimage.server --model-path /models/X [--timeout 1800] -- "--tp-size 8" "--ep-size 8"

It relays the server's log unchanged on stdout and adds its own ``[forgepatch-server] ...``
lines, which the host-side monitor reads like any other marker. **Ready** means the CUDA graph
capture finished (unless ``--disable-cuda-graph`` is among the flags) AND one real chat
completion was answered — ``/health`` = 200 alone is not Ready. Then the server is stopped
cleanly (SIGTERM to its process group, SIGKILL after a grace period).

Exit: 0 Ready and answered · 1 failed (signature in the log) · 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from forgepatch.inimage import imported, toolchain
from forgepatch.inimage.monitor import Monitor
from forgepatch.inimage.process import pump_lines, stop_group
from forgepatch.inimage.signatures import SIGNATURES

# Errors after which a still-running server is considered hung (tracebacks can be benign).
FATAL = frozenset(s.id for s in SIGNATURES if s.rank >= 50 or s.id == "sigquit")

TAG = "[forgepatch-server]"
DEFAULT_LAUNCH = f"{shlex.quote(sys.executable)} -m sglang.launch_server"
FLAG_GROUP = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*(\s+\S.*)?")
OWNED = ("--model-path", "--model", "--host", "--port")


def say(msg: str) -> str:
    line = f"{TAG} {msg}"
    print(line, flush=True)
    return line


def flag_tokens(groups: list[str]) -> list[str]:
    """Validate flag groups (``--name [value]``) and split them into argv tokens."""
    tokens: list[str] = []
    for group in groups:
        if not FLAG_GROUP.fullmatch(group.strip()):
            raise ValueError(f"malformed flag group {group!r} (want '--name [value]')")
        parts = shlex.split(group)
        if parts[0] in OWNED:
            raise ValueError(f"flag group {group!r}: {parts[0]} is set by the smoke driver")
        tokens += parts
    return tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body text); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def chat_once(base: str, timeout: float) -> tuple[bool, str]:
    """One real chat completion: (answered, detail)."""
    deadline = time.monotonic() + min(30.0, timeout)
    while True:
        status, text = http("POST", f"{base}/v1/chat/completions", {
            "model": "default",
            "messages": [{"role": "user", "content": "Reply with one word: ready?"}],
            "max_tokens": 8,
            "temperature": 0,
        }, timeout=timeout)
        if status in (0, 503) and time.monotonic() < deadline:  # not listening yet
            time.sleep(0.5)
            continue
        break
    if status != 200:
        return False, f"HTTP {status or 'no answer'}: {text.strip()[:200]}"
    try:
        choice = json.loads(text)["choices"][0]
        content = (choice.get("message") or {}).get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError):
        return False, f"HTTP 200 but not a chat completion: {text.strip()[:200]}"
    if not content.strip() and choice.get("finish_reason") is None:
        return False, "HTTP 200 with an empty completion"
    return True, f"HTTP 200, {len(content)} chars, finish_reason={choice.get('finish_reason')}"


class Driver:
    def __init__(self, args: argparse.Namespace, tokens: list[str]):
        self.args = args
        self.tokens = tokens
        self.port = args.port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        markers = json.loads(args.markers) if args.markers else None
        self.monitor = Monitor(markers)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.proc: subprocess.Popen | None = None

    def note(self, msg: str) -> None:
        self.monitor.feed(say(msg))

    def argv(self) -> list[str]:
        """The launch command, run through ``inimage.imported`` when it is a Python one: the
        server process prints the SGLang and FlashInfer it imported before it starts."""
        return imported.wrap(shlex.split(self.args.launch)) + [
            "--model-path", self.args.model_path, "--host", "127.0.0.1", "--port", str(self.port), *self.tokens,
        ]

    def run(self) -> int:
        argv = self.argv()
        self.note(f"launch {shlex.join(argv)}")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0)
        print(toolchain.line(), flush=True)  # the stack this server runs on, for the result
        pump = pump_lines(self.proc.stdout, self.lines.put)
        try:
            ok = self._watch(pump)
        finally:
            self._stop()
        self.note(f"result status={'pass' if ok else 'fail'}")
        return 0 if ok else 1

    def _drain(self, wait: float) -> None:
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            return
        while line is not None:
            print(line, flush=True)
            for ev in self.monitor.feed(line):
                if ev.kind == "error" and self.fatal_at is None and ev.id in FATAL:
                    self.fatal_at = time.monotonic()
                elif ev.kind == "phase":
                    self.fatal_at = None  # progress after an error: it was survived
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return

    def _watch(self, pump) -> bool:
        args = self.args
        deadline = time.monotonic() + args.timeout
        graphs_off = "--disable-cuda-graph" in self.tokens
        self.fatal_at: float | None = None
        next_health = 0.0
        exited_at: float | None = None
        while True:
            self._drain(0.1)
            seen = {p[0] for p in self.monitor.phases}
            captured = "capture_end" in seen or graphs_off
            if self.proc.poll() is not None and exited_at is None:
                exited_at = time.monotonic()
            # children may hold the log pipe open after the launcher died: wait 2 s at most
            if exited_at is not None and self.lines.empty() and (not pump.is_alive() or time.monotonic() - exited_at > 2):
                self.note(f"server exited code={self.proc.returncode} before Ready (last phase: {self.monitor.stage})")
                return False
            now = time.monotonic()
            if now > deadline:
                self.note(f"timeout after {args.timeout:g} s in {self.monitor.stage}")
                return False
            if self.fatal_at is not None and now - self.fatal_at > args.fatal_grace:
                self.note(f"stopping: server still alive {args.fatal_grace:g} s after a fatal error")
                return False
            if "server_ready" in seen and not captured:
                self.note("no-graph-capture: the server reported ready but no CUDA graph capture was logged")
                return False
            if captured and now >= next_health and self.fatal_at is None:
                next_health = now + 0.5
                status, _ = http("GET", f"{self.base}/health", timeout=2.0)
                if status != 200:
                    continue
                self.note("health 200; sending one chat completion")
                answered, detail = chat_once(self.base, args.request_timeout)
                self._drain(0.0)
                if not answered:
                    self.note(f"generation-failed {detail}")
                    return False
                self.note(f"answered {detail}")
                return True

    def _stop(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc.pid, self.args.stop_grace, self.proc)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._drain(0.2)
        self.note(f"server stopped code={self.proc.returncode}")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m forgepatch.inimage.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--launch", default=os.environ.get("FORGEPATCH_SGLANG_LAUNCH", DEFAULT_LAUNCH),
                   help="server command (default: this python -m sglang.launch_server)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to reach Ready")
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--fatal-grace", type=float, default=10.0, help="seconds a server may linger after a fatal error")
    p.add_argument("--stop-grace", type=float, default=20.0)
    p.add_argument("--markers", help="JSON object of marker overrides (a pin's markers)")
    p.add_argument("flags", nargs="*", help="flag groups, one per argument, after --")
    return p.parse_args(argv), []


def main(argv: list[str] | None = None) -> int:
    args, _ = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        tokens = flag_tokens(args.flags)
    except ValueError as exc:
        print(f"forgepatch-server: error: {exc}", file=sys.stderr)
        return 2
    driver = Driver(args, tokens)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        return driver.run()
    except KeyboardInterrupt:
        say("interrupted; server stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
