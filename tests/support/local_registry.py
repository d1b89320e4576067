"""A real registry (tests/support/registry.sh) and a second Docker engine
(tests/support/second_engine.sh) for the tests, started by the session fixtures in
conftest.py and stopped by pid. Helpers read the registry's own storage and log, so a test
can assert what was (not) uploaded."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent


@dataclass
class LocalRegistry:
    pid: int
    port: int
    root: Path
    user: str | None = None
    password: str | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def repo(self, name: str) -> str:
        return f"{self.host}/{name}"

    def blobs(self) -> set[str]:
        """Every blob the registry stores (layers, configs and manifests)."""
        base = self.root / "storage" / "docker" / "registry" / "v2" / "blobs" / "sha256"
        return {f"sha256:{p.parent.name}" for p in base.glob("*/*/data")}

    def log(self) -> str:
        return (self.root / "registry.log").read_text(errors="replace")

    def upload_sessions(self) -> int:
        """Blob upload sessions the registry has started (POST .../blobs/uploads/)."""
        return len(re.findall(r'"POST /v2/\S*/blobs/uploads/', self.log()))  # the access log

    def manifest_puts(self) -> int:
        return len(re.findall(r'"PUT /v2/\S*/manifests/', self.log()))

    def docker_config(self, directory: Path, user: str | None = ..., password: str | None = ...) -> Path:
        """A Docker config dir holding credentials for this registry (DOCKER_CONFIG); by
        default the right ones, ``user=None`` for none."""
        directory.mkdir(parents=True, exist_ok=True)
        user = self.user if user is ... else user
        password = self.password if password is ... else password
        auths = {self.host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}} if user else {}
        (directory / "config.json").write_text(json.dumps({"auths": auths}))
        return directory

    def stop(self) -> None:
        stop_pid(self.pid)


def start_registry(root: Path, user: str | None = None, password: str | None = None) -> LocalRegistry:
    args = ["bash", str(SUPPORT / "registry.sh"), "start", str(root)] + ([user, password] if user else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=300).stdout.split()
    return LocalRegistry(int(out[0]), int(out[1]), root, user, password)


@dataclass
class Engine:
    """A second Docker engine: its own data root, exec root, pid file and socket."""

    pid: int
    socket: Path
    root: Path

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.host, version="auto", timeout=300)

    def stop(self) -> None:
        stop_pid(self.pid, wait=30)


def start_engine(root: Path) -> Engine:
    out = subprocess.run(["bash", str(SUPPORT / "second_engine.sh"), str(root)], check=True, capture_output=True,
                         text=True, timeout=180).stdout.split()
    return Engine(int(out[0]), Path(out[1]), root)


def stop_pid(pid: int, wait: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def registry_http(host: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """One plain HTTP request to a registry (status, headers, body): what the tests send around forgepatch."""
    conn = http.client.HTTPConnection(host, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()
