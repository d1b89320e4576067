"""Run smoke jobs in containers through the Docker SDK.

Each job gets its own container: the GPU subset the scheduler gave it (device requests),
network ``none`` unless its profile says ``network = true``, an init process, labels naming
the run, the job and the owning process. The log is streamed line by line into the job's log
file and monitor. A hard timeout kills the container. The container is removed in every case —
normal exit, failure, timeout, cancel (Ctrl-C), or an engine error — and containers left by a
forgepatch process that no longer exists are reaped at the next run.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path

from forgepatch.combination import CONTAINER_JOB, CONTAINER_OWNER, CONTAINER_RUN
from forgepatch.infra.refs import is_digest_ref, parse, parse_digest_ref, repository
from forgepatch.errors import BadInput
from forgepatch.infra import dockerapi, registry
from forgepatch.inimage.monitor import LineSplitter
from forgepatch.infra.dockerapi import repo_digest
from forgepatch.inimage.toolchain import prelude
from forgepatch.smoke.admission import admit
from forgepatch.smoke.gpus import host_gpus
from forgepatch.smoke.jobs import JobSpec, LogSink, RunOutcome

LABEL, OWNER = CONTAINER_RUN, CONTAINER_OWNER  # container labels (forgepatch.combination)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DockerRunner:
    name = "docker"

    def __init__(self, client=None, shm_size: str = "16g"):
        if client is None:
            try:
                client = dockerapi.client()
            except BadInput as exc:
                raise BadInput(f"--runner docker: {exc}") from None
        self.client = client
        # log streams can be silent for minutes (weight loading): no read timeout on them
        self.stream_api = dockerapi.streaming_api(client)
        self.run_id = uuid.uuid4().hex[:8]
        self.shm_size = shm_size
        self.on_pull = None  # (image, docker pull progress chunk) -> None

    # -- before anything runs -----------------------------------------------------------------
    def available_gpus(self) -> list[int]:
        return host_gpus()

    def preflight(self, jobs: list[JobSpec]) -> None:
        """BadInput if an image is missing, or was built by forgepatch for another arch or pin
        (or patchset, when the job names one) than a job of it says (results would be filed
        under the wrong combination); reap containers of dead forgepatch processes.

        An image given by digest (``repo@sha256:...``) that this engine lacks is checked from
        the registry's manifest and config first (nothing is pulled for a refused job), then
        pulled (``on_pull`` sees the progress)."""
        import docker.errors

        if any(not j.image for j in jobs):
            raise BadInput("--runner docker needs an image for every job (--image or [smoke] image)")
        labels: dict[str, dict[str, str]] = {}
        missing: list[str] = []
        for image in sorted({j.image for j in jobs if j.image}):
            try:
                labels[image] = dict(self.client.images.get(image).labels or {})
            except docker.errors.ImageNotFound:
                if not is_digest_ref(image):
                    ref = parse(image, "--image")
                    hint = ("; a GPU host pulls by digest: give --image REPO@sha256:... or --builds RECORD"
                            if ref.registry else " (build it: forgepatch build)")
                    if ref.registry:
                        parse_digest_ref(image, "--image")  # a tag where a digest is required: one line, exit 2
                    raise BadInput(f"image {image!r} not found in the local Docker engine{hint}") from None
                labels[image] = self._remote_labels(parse_digest_ref(image, "--image"))
                missing.append(image)
            except docker.errors.APIError as exc:
                raise BadInput(f"image {image!r}: {exc.explanation or exc}") from None
        for job in jobs:  # the policy: is this image the job's combination?
            admit(job, labels.get(job.image or "", {}), must_be_forgepatch=job.image in missing)
        for image in missing:
            self._pull(image)
        self.reap_stale()

    def _remote_labels(self, ref) -> dict[str, str]:
        found = registry.remote_image(ref)
        if found is None:
            raise BadInput(f"image {ref}: the registry {ref.host} has no such digest")
        return found.labels

    def _pull(self, image: str) -> None:
        on = getattr(self, "on_pull", None)
        registry.pull(self.client.api, parse(image), (lambda kind, data: on(image, data)) if on else None)

    def reap_stale(self) -> int:
        """Remove smoke containers whose owning forgepatch process on this host has gone."""
        host = socket.gethostname()
        removed = 0
        for c in self.client.containers.list(all=True, filters={"label": LABEL}):
            owner = c.labels.get(OWNER, "")
            h, _, pid = owner.rpartition(":")
            if h == host and pid.isdigit() and not _pid_alive(int(pid)):
                self._remove(c.name)
                removed += 1
        return removed

    # -- one job ---------------------------------------------------------------------------
    def container_name(self, spec: JobSpec) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.id)[:40]
        return f"forgepatch-smoke-{self.run_id}-{slug}-{uuid.uuid4().hex[:6]}"

    def _create_kwargs(self, spec: JobSpec, gpu_ids: list[int], name: str) -> dict:
        from docker.types import DeviceRequest

        kwargs = dict(
            image=spec.image,
            command=prelude("python3", list(spec.command)) if spec.kind == "command" else list(spec.command),
            name=name,
            detach=True,
            init=True,
            environment={"PYTHONUNBUFFERED": "1", **spec.env},
            labels={LABEL: self.run_id, CONTAINER_JOB: spec.id, OWNER: _owner()},
            network_mode=None if spec.network else "none",
            shm_size=self.shm_size if spec.kind == "server" else None,
        )
        if gpu_ids:
            kwargs["device_requests"] = [DeviceRequest(device_ids=[str(i) for i in gpu_ids], capabilities=[["gpu"]])]
        return {k: v for k, v in kwargs.items() if v is not None}

    def run(self, spec, gpu_ids, log_path, cancel, on_event=None) -> RunOutcome:
        import docker.errors

        sink = LogSink(spec, Path(log_path), on_event)
        name = self.container_name(spec)
        t0 = time.monotonic()
        state = {"timed_out": False, "interrupted": False}
        done = threading.Event()
        container = None
        image_id = digest = None
        labels: dict[str, str] = {}
        code: int | None = None
        stdout = ""
        error = None

        def watchdog() -> None:
            # keeps killing until the job is over: a kill may race the container's creation
            while not done.wait(0.05):
                if not (state["timed_out"] or state["interrupted"]):
                    if cancel.is_set():
                        state["interrupted"] = True
                    elif time.monotonic() - t0 > spec.timeout_s:
                        state["timed_out"] = True
                    else:
                        continue
                try:
                    self.client.api.kill(name)
                except docker.errors.APIError:
                    pass
                done.wait(0.5)

        guard = threading.Thread(target=watchdog, daemon=True)
        guard.start()
        try:
            container = self.client.containers.create(**self._create_kwargs(spec, gpu_ids, name))
            image_id = container.attrs.get("Image")
            inspected = self.client.api.inspect_image(image_id)
            labels = dict((inspected.get("Config") or {}).get("Labels") or {})
            # the digest in the repository the image was pulled from (an image pushed to a
            # mirror too has one digest per repository; the first one may be the mirror's)
            digest = spec.image if is_digest_ref(spec.image or "") else (
                repo_digest(inspected, repository(spec.image or "")) or repo_digest(inspected))
            if not (state["interrupted"] or cancel.is_set()):
                container.start()
                split = LineSplitter()
                for chunk in self.stream_api.logs(name, stream=True, follow=True):
                    for line in split.push(chunk):
                        sink.line(line)
                for line in split.flush():
                    sink.line(line)
                code = container.wait(timeout=60).get("StatusCode")
                if spec.kind == "probe":
                    stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            else:
                state["interrupted"] = True
        except docker.errors.APIError as exc:
            error = f"docker: {exc.explanation or exc}"
        except Exception as exc:  # engine gone, read timeout, ...
            error = f"docker: {type(exc).__name__}: {exc}"
        finally:
            done.set()
            self._remove(name)
        triage = sink.close(code, state["timed_out"], spec.timeout_s)
        if not stdout:
            stdout = Path(log_path).read_text(encoding="utf-8", errors="replace")
        return RunOutcome(code, state["timed_out"], state["interrupted"], str(log_path), triage, stdout,
                          time.monotonic() - t0, gpu_ids, error=None if (state["timed_out"] or state["interrupted"]) else error,
                          image_id=image_id, image_digest=digest, image_labels=labels)

    def _remove(self, name: str) -> None:
        """Force-remove a container by name; retry while the engine is busy; never raise."""
        import docker.errors

        for attempt in range(20):
            try:
                self.client.api.remove_container(name, force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if "already in progress" in str(exc):
                    time.sleep(0.1 * (attempt + 1))
                    continue
                time.sleep(0.1 * (attempt + 1))
            except Exception:
                time.sleep(0.1 * (attempt + 1))

    def leftovers(self) -> list[str]:
        """Names of this runner's containers still present (0 after every run)."""
        return [c.name for c in self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.run_id}"})]
