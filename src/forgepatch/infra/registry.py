"""Registry access, one way: pushes and pulls go through the Docker engine (docker SDK), and
what must be known without pulling (a tag's digest, an image's labels, a second tag for the
same manifest) goes over the registry's distribution API (v2) directly.

Credentials come from the user's Docker config (``~/.docker/config.json`` or
``$DOCKER_CONFIG``, credential helpers included), read by the docker SDK as ``docker login``
left them; they are sent to the registry and never printed. A registry on 127.0.0.1 or
localhost is spoken to over plain HTTP (Docker allows that without daemon configuration);
any other over HTTPS.

Errors are one line: an unreachable registry, refused credentials, a tag where a digest is
required, or a malformed reference are bad input (exit 2); a digest or tag the registry does
not have is reported by the caller (``RemoteImage`` is None) as a failed check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from forgepatch.infra.refs import ImageRef, parse
from forgepatch.errors import BadInput, Failure

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT = ", ".join((MANIFEST_V2, MANIFEST_LIST, OCI_MANIFEST, OCI_INDEX))
INDEXES = (MANIFEST_LIST, OCI_INDEX)

Event = Callable[[str, dict[str, Any]], None]


@dataclass
class Manifest:
    digest: str  # sha256:... of the bytes below (Docker-Content-Digest)
    media_type: str
    raw: bytes

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.raw)

    @property
    def config_digest(self) -> str | None:
        """The image config's digest: the image ID Docker gives the image once pulled."""
        return (self.doc.get("config") or {}).get("digest")

    @property
    def layers(self) -> list[str]:
        return [layer["digest"] for layer in self.doc.get("layers") or []]


@dataclass
class RemoteImage:
    """An image as the registry has it, read without pulling."""

    ref: ImageRef  # as asked for
    digest: str  # the manifest digest the reference resolves to
    image_id: str  # the config digest (= the local image ID once pulled)
    labels: dict[str, str] = field(default_factory=dict)
    created: str | None = None

    @property
    def digest_ref(self) -> str:
        """``repo@sha256:...``."""
        return f"{self.ref.name}@{self.digest}"


class Registry:
    """The distribution API of one registry host, with the Docker config's credentials."""

    def __init__(self, ref: ImageRef, timeout: float = 30.0):
        import requests

        self.ref = ref
        self.host = ref.host
        self.base = f"{'http' if ref.loopback else 'https'}://{self.host}"
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False if ref.loopback else True  # never send loopback through a proxy
        self._creds = _credentials(ref)
        self._token: str | None = None
        self._basic = False

    # -- transport ------------------------------------------------------------------------
    def request(self, method: str, path: str, *, scope: str, headers: dict[str, str] | None = None,
                data: bytes | None = None, ok: tuple[int, ...] = (200,), missing_ok: bool = False):
        """One API call with the auth the registry asks for; None for a 404 when
        ``missing_ok``; BadInput for an unreachable registry or refused credentials."""
        import requests

        url = self.base + path
        for attempt in range(2):
            hdrs = dict(headers or {})
            if self._token:
                hdrs["Authorization"] = f"Bearer {self._token}"
            try:
                resp = self.session.request(method, url, headers=hdrs, data=data, timeout=self.timeout,
                                            auth=self._creds if self._basic else None, allow_redirects=True)
            except requests.RequestException as exc:
                raise BadInput(f"cannot reach registry {self.host} ({self.base}): {_why(exc)}") from None
            if resp.status_code == 401 and attempt == 0:
                self._authenticate(resp.headers.get("WWW-Authenticate", ""), scope)
                continue
            break
        if resp.status_code == 401:
            raise BadInput(self._refused())
        if resp.status_code == 403:
            raise BadInput(f"registry {self.host} denied {method} {_scope_name(scope)} to "
                           f"{self._who()} (check the repository's permissions)")
        if resp.status_code == 404 and missing_ok:
            return None
        if resp.status_code not in ok:
            raise Failure(f"registry {self.host}: {method} {path} answered {resp.status_code} {_error_text(resp)}")
        return resp

    def _authenticate(self, challenge: str, scope: str) -> None:
        kind, _, params = challenge.partition(" ")
        if kind.lower() == "basic":
            if not self._creds:
                raise BadInput(self._refused())
            self._basic = True
            return
        if kind.lower() != "bearer":
            raise BadInput(f"registry {self.host} asks for {kind or 'an unknown'} authentication, which forgepatch does not speak")
        import requests

        fields = dict(_challenge_fields(params))
        realm = fields.pop("realm", None)
        if not realm:
            raise BadInput(f"registry {self.host} sent a bearer challenge without a realm")
        query = {"service": fields.get("service", ""), "scope": scope}
        try:
            resp = self.session.get(realm, params=query, auth=self._creds, timeout=self.timeout)
        except requests.RequestException as exc:
            raise BadInput(f"cannot reach the token service of registry {self.host}: {_why(exc)}") from None
        if resp.status_code != 200:
            raise BadInput(self._refused())
        body = resp.json()
        self._token = body.get("token") or body.get("access_token")

    def _who(self) -> str:
        return f"user {self._creds[0]!r} (Docker config)" if self._creds else "anonymous access"

    def _refused(self) -> str:
        login = f"docker login {self.ref.registry}" if self.ref.registry else "docker login"
        if self._creds:
            return (f"registry {self.host} refused the credentials of user {self._creds[0]!r} from the Docker "
                    f"config (`{login}`)")
        return f"registry {self.host} needs credentials: `{login}`"

    # -- API ------------------------------------------------------------------------------
    def check(self) -> None:
        """The registry answers and accepts our credentials (GET /v2/)."""
        self.request("GET", "/v2/", scope=f"repository:{self.ref.api_path}:pull")

    def manifest(self, ref: ImageRef, platform: tuple[str, str] = ("linux", "amd64")) -> Manifest | None:
        """The manifest ``ref`` names (None: the registry does not have it). An index
        (multi-platform) is resolved to ``platform``'s manifest; ``digest`` stays the
        index's own (what the reference resolves to)."""
        top = self._get_manifest(ref, ref.reference)
        if top is None or top.media_type not in INDEXES:
            return top
        for entry in top.doc.get("manifests") or []:
            plat = entry.get("platform") or {}
            if (plat.get("os"), plat.get("architecture")) == platform:
                inner = self._get_manifest(ref, entry["digest"])
                if inner is not None:
                    return Manifest(top.digest, inner.media_type, inner.raw)
        raise Failure(f"{ref}: the registry's index has no {platform[0]}/{platform[1]} image")

    def _get_manifest(self, ref: ImageRef, reference: str) -> Manifest | None:
        resp = self.request("GET", f"/v2/{ref.api_path}/manifests/{reference}", scope=_pull(ref),
                            headers={"Accept": ACCEPT}, missing_ok=True)
        if resp is None:
            return None
        digest = resp.headers.get("Docker-Content-Digest") or _sha256(resp.content)
        return Manifest(digest, resp.headers.get("Content-Type", "").split(";")[0], resp.content)

    def head(self, ref: ImageRef) -> str | None:
        """The digest ``ref`` resolves to (manifest HEAD), None when the registry lacks it."""
        resp = self.request("HEAD", f"/v2/{ref.api_path}/manifests/{ref.reference}", scope=_pull(ref),
                            headers={"Accept": ACCEPT}, missing_ok=True)
        if resp is None:
            return None
        return resp.headers.get("Docker-Content-Digest")

    def config(self, ref: ImageRef, manifest: Manifest) -> dict[str, Any]:
        """The image config blob (labels, created): a few KB, never a layer."""
        if not manifest.config_digest:
            raise Failure(f"{ref}: the manifest names no image config ({manifest.media_type})")
        resp = self.request("GET", f"/v2/{ref.api_path}/blobs/{manifest.config_digest}", scope=_pull(ref))
        return json.loads(resp.content)

    def put_manifest(self, ref: ImageRef, tag: str, manifest: Manifest) -> str:
        """Point ``tag`` at ``manifest`` (the same bytes, so the same digest): a new tag for an
        image the registry has, with no blob uploaded."""
        resp = self.request("PUT", f"/v2/{ref.api_path}/manifests/{tag}", scope=f"repository:{ref.api_path}:pull,push",
                            headers={"Content-Type": manifest.media_type}, data=manifest.raw, ok=(200, 201))
        got = resp.headers.get("Docker-Content-Digest") or manifest.digest
        if got != manifest.digest:
            raise Failure(f"registry {self.host} stored {ref.name}:{tag} as {got}, not {manifest.digest}")
        return got


def _pull(ref: ImageRef) -> str:
    return f"repository:{ref.api_path}:pull"


def _scope_name(scope: str) -> str:
    return scope.split(":")[1] if scope.count(":") >= 2 else scope


def _challenge_fields(params: str):
    import re

    for m in re.finditer(r'(\w+)="([^"]*)"', params):
        yield m.group(1), m.group(2)


def _sha256(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def _why(exc: Exception) -> str:
    text = str(exc)
    for needle, short in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                          ("Temporary failure in name resolution", "unknown host"), ("timed out", "timed out"),
                          ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"),
                          ("Network is unreachable", "network unreachable")):
        if needle in text:
            return short
    return type(exc).__name__


def _error_text(resp) -> str:
    try:
        errors = resp.json().get("errors") or []
        return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or resp.reason
    except ValueError:
        return resp.reason or ""


def _credentials(ref: ImageRef) -> tuple[str, str] | None:
    """(user, password) for ``ref``'s registry from the Docker config (the SDK's reader,
    credential helpers included), or None."""
    from docker import auth

    try:
        config = auth.load_config()
        found = auth.resolve_authconfig(config, ref.auth_key) or {}
    except Exception as exc:  # noqa: BLE001 - an unreadable config or a failing helper
        raise BadInput(f"cannot read Docker credentials for {ref.registry or 'Docker Hub'}: {type(exc).__name__}") from None
    user = found.get("username") or found.get("Username")
    password = found.get("password") or found.get("Password")
    return (user, password) if user and password else None


# -- what the stages call ----------------------------------------------------------------------

def remote_image(ref: ImageRef | str, what: str = "image", platform: str | None = None) -> RemoteImage | None:
    """The registry's facts about ``ref`` (digest, image ID, labels), None when it has no
    such tag or digest. Reads two small documents (manifest, config); pulls nothing. An index
    (multi-platform) is read for ``platform`` (``linux/arm64``; default ``linux/amd64``)."""
    ref = parse(ref, what) if isinstance(ref, str) else ref
    reg = Registry(ref)
    os_name, _, rest = (platform or "linux/amd64").partition("/")
    manifest = reg.manifest(ref, (os_name, rest.partition("/")[0]))
    if manifest is None:
        return None
    config = reg.config(ref, manifest)
    labels = dict(((config.get("config") or {}).get("Labels")) or {})
    return RemoteImage(ref, manifest.digest, manifest.config_digest or "", labels, config.get("created"))


def check_access(ref: ImageRef | str, what: str = "registry") -> None:
    """BadInput unless the registry of ``ref`` answers and takes our credentials."""
    ref = parse(ref, what) if isinstance(ref, str) else ref
    Registry(ref).check()


def tag_remote(source: ImageRef, tags: list[str]) -> dict[str, str | None]:
    """Point each of ``tags`` (in ``source``'s repository) at ``source``'s manifest by a
    manifest PUT of the same bytes: no layer or config is uploaded. Returns, per tag, the
    digest it named before (None: it did not exist). Failure when ``source`` is missing."""
    reg = Registry(source)
    manifest = reg._get_manifest(source, source.reference)
    if manifest is None:
        raise Failure(f"{source}: the registry has no such image")
    before = {tag: reg.head(source.with_tag(tag)) for tag in tags}
    for tag in tags:
        if before[tag] != manifest.digest:
            reg.put_manifest(source, tag, manifest)
    return before


def restore_remote(source: ImageRef, before: dict[str, str | None]) -> None:
    """Undo ``tag_remote`` where a tag named another manifest before (a tag that did not
    exist cannot be removed without deleting the manifest, which other tags share)."""
    reg = Registry(source)
    for tag, digest in before.items():
        if digest:
            old = reg._get_manifest(source, digest)
            if old is not None:
                reg.put_manifest(source, tag, old)


@dataclass
class Pushed:
    ref: str  # the tag pushed (or found)
    digest: str  # repo@sha256:...
    image_id: str  # the config digest the registry holds under that tag
    uploaded: bool  # False: the registry had this content already (nothing sent)
    seconds: float = 0.0


def push(api, image_id: str, tag_ref: str, same_content: Mapping[str, str | None] | None = None,
         on_event: Event | None = None) -> Pushed:
    """Push ``tag_ref`` (the content-addressed tag, naming ``image_id`` locally) unless the
    registry already has that tag with the same content (the same image, or an image whose
    labels ``same_content`` names match — the caller's content hash and base labels; a None
    value is not compared): a manifest HEAD/GET and the config blob decide it, no layer moves."""
    import time

    started = time.perf_counter()
    emit = on_event or (lambda kind, data: None)
    ref = parse(tag_ref, "push")
    reg = Registry(ref)
    manifest = reg.manifest(ref)
    if manifest is not None:
        same = manifest.config_digest == image_id
        if not same:
            labels = ((reg.config(ref, manifest).get("config") or {}).get("Labels")) or {}
            wanted = {key: want for key, want in (same_content or {}).items() if want is not None}
            same = bool(wanted) and all(labels.get(key) == want for key, want in wanted.items())
        if same:
            emit("push-hit", {"ref": tag_ref, "digest": manifest.digest})
            return Pushed(tag_ref, f"{ref.name}@{manifest.digest}", manifest.config_digest or image_id, False,
                          time.perf_counter() - started)
    digest = _engine_push(api, ref, emit)
    now = reg.head(ref)
    if now != digest:
        raise Failure(f"pushed {tag_ref} as {digest}, but the registry now resolves it to {now}")
    return Pushed(tag_ref, f"{ref.name}@{digest}", image_id, True, time.perf_counter() - started)


def _engine_push(api, ref: ImageRef, emit: Event) -> str:
    from docker.errors import APIError, DockerException

    digest = None
    try:
        for chunk in api.push(ref.name, tag=ref.tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                message = ((chunk.get("errorDetail") or {}).get("message") or chunk.get("error") or "").strip()
                raise _push_error(ref, message)
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = aux["Digest"]
            emit("push", chunk)
    except APIError as exc:
        raise _push_error(ref, str(exc.explanation or exc)) from None
    except DockerException as exc:
        raise BadInput(f"push {ref}: lost the Docker engine: {exc}") from None
    if not digest:
        raise Failure(f"push {ref}: the engine reported no digest")
    return digest


def _push_error(ref: ImageRef, message: str) -> BadInput:
    text = " ".join(message.split())
    lower = text.lower()
    if "unauthorized" in lower or "authentication required" in lower or "denied" in lower:
        return BadInput(f"registry {ref.host} refused the push of {ref}: {text} (`docker login{' ' + ref.registry if ref.registry else ''}`)")
    if "connection refused" in lower or "no such host" in lower or "dial tcp" in lower:
        return BadInput(f"cannot reach registry {ref.host} to push {ref}: {text}")
    return BadInput(f"push {ref}: {text}")


def pull(api, ref: ImageRef, on_event: Event | None = None) -> str:
    """Pull ``ref`` (a digest reference) into the engine; returns the local image ID."""
    from docker.errors import APIError, DockerException

    emit = on_event or (lambda kind, data: None)
    try:
        for chunk in api.pull(ref.name, tag=ref.reference, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                message = ((chunk.get("errorDetail") or {}).get("message") or chunk.get("error") or "").strip()
                raise BadInput(f"pull {ref}: {' '.join(message.split())}")
            emit("pull", chunk)
    except APIError as exc:
        raise BadInput(f"pull {ref}: {exc.explanation or exc}") from None
    except DockerException as exc:
        raise BadInput(f"pull {ref}: lost the Docker engine: {exc}") from None
    return api.inspect_image(str(ref))["Id"]
