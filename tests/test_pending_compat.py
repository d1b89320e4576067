"""The pending registry-tags record of `release` (`forgepatch-pending-tags/1`, release/pending.py)
is a typed model now (issue 25). A record written by the untyped writer before it
(tests/fixtures/pending-tags-v1, main 8c2fce6) still reads, is written back byte for byte,
and is recovered by the next release: the release the ledger has gets its registry tags
(rolled forward, against a real registry), the one it has not is dropped (rolled back). A
record that does not read stops the release with one line naming the file, and is left."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from forgepatch.errors import BadInput
from forgepatch.release import pending
from forgepatch.release.ledger import Ledger
from support.local_registry import registry_http

FIXTURES = Path(__file__).parent / "fixtures"
RECORD = FIXTURES / "pending-tags-v1" / "record.json"
LEDGER = FIXTURES / "ledger-v1" / "registry" / "releases" / "ledger.json"
WRITTEN_FOR = "127.0.0.1:5000"  # the registry address the fixture was written with (its README)
REPO = "forgepatch-test/pending-v1"
RELEASED, NOT_RELEASED = "forgepatch/p23/sm120", "forgepatch/p23/sm100"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class TinyImage:
    """A one-layer OCI image made of fixed bytes: the same manifest digest every time (the
    digest the fixture records), pushed blob by blob over the registry API."""

    LAYER = bytes(1024)  # an empty tar: two zero blocks
    CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [_sha(LAYER)]}}, sort_keys=True).encode()
    MANIFEST = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(CONFIG), "size": len(CONFIG)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _sha(LAYER), "size": len(LAYER)}],
    }, sort_keys=True).encode()
    DIGEST = _sha(MANIFEST)

    @classmethod
    def push(cls, host: str, repo: str) -> None:
        for blob in (cls.LAYER, cls.CONFIG):
            status, headers, body = registry_http(host, "POST", f"/v2/{repo}/blobs/uploads/", b"")
            assert status == 202, (status, body[:200])
            location = headers["Location"]
            location = location.split(host, 1)[1] if "://" in location else location
            status, _, body = registry_http(host, "PUT", f"{location}{'&' if '?' in location else '?'}digest={_sha(blob)}", blob,
                                    {"Content-Type": "application/octet-stream"})
            assert status == 201, (status, body[:200])
        status, _, body = registry_http(host, "PUT", f"/v2/{repo}/manifests/{cls.DIGEST}", cls.MANIFEST,
                                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        assert status == 201, (status, body[:200])


def _tag_digest(host: str, repo: str, tag: str) -> str | None:
    status, headers, _ = registry_http(host, "HEAD", f"/v2/{repo}/manifests/{tag}",
                               headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    return headers.get("Docker-Content-Digest") if status == 200 else None


@pytest.fixture
def ledger(tmp_path, monkeypatch) -> Ledger:
    """The ledger of tests/fixtures/ledger-v1/registry (it has RELEASED), in a private cache dir."""
    monkeypatch.setenv("FORGEPATCH_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "releases").mkdir()
    shutil.copy(LEDGER, tmp_path / "releases" / "ledger.json")
    return Ledger(tmp_path / "releases" / "ledger.json")


def _place(ledger: Ledger, text: str) -> Path:
    path = pending._path(ledger)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_fixture_is_the_tiny_image_and_the_ledger_has_only_one_of_its_releases():
    doc = json.loads(RECORD.read_text())
    assert {r["digest"] for r in doc["releases"].values()} == {f"{WRITTEN_FOR}/{REPO}@{TinyImage.DIGEST}"}
    assert [e["tag"] for e in json.loads(LEDGER.read_text())["releases"]] == [RELEASED]


def test_a_record_written_before_the_model_reads_and_writes_back_byte_for_byte(ledger):
    _place(ledger, RECORD.read_text())
    record = pending._read(ledger)
    assert list(record.releases) == [RELEASED, NOT_RELEASED]
    one = record.releases[RELEASED]
    assert one.digest_ref == f"{WRITTEN_FOR}/{REPO}@{TinyImage.DIGEST}"
    assert one.tags == ["p23-sm120-validated", "forgepatch-p23-sm120"] and one.pid == 24062
    assert one.promotion().refs() == [f"{WRITTEN_FOR}/{REPO}:p23-sm120-validated", f"{WRITTEN_FOR}/{REPO}:forgepatch-p23-sm120"]
    assert record.dumps() == RECORD.read_text()  # the typed writer writes what the untyped one did


def test_the_typed_writer_writes_the_documented_format(ledger):
    from forgepatch.release import promote

    promo = promote.plan(f"{WRITTEN_FOR}/{REPO}@{TinyImage.DIGEST}", "p23", "sm120", RELEASED)
    pending.add(ledger, RELEASED, promo)
    doc = json.loads(pending._path(ledger).read_text())
    assert doc["format"] == "forgepatch-pending-tags/1" and doc["ledger"] == str(ledger.path.resolve())
    assert doc["releases"][RELEASED]["digest"] == promo.digest_ref and doc["releases"][RELEASED]["tags"] == promo.tags
    pending.drop(ledger, RELEASED)
    assert not pending._path(ledger).exists()  # the last release dropped: no record left


def test_a_record_written_before_the_model_is_recovered_by_the_next_release(ledger, registry, capfd):
    TinyImage.push(registry.host, REPO)
    path = _place(ledger, RECORD.read_text().replace(f"{WRITTEN_FOR}/", f"{registry.host}/"))
    assert _tag_digest(registry.host, REPO, "p23-sm120-validated") is None
    dropped = pending.recover(ledger)
    assert dropped == [NOT_RELEASED]  # no ledger entry: rolled back, none of its tags set
    for tag in ("p23-sm120-validated", "forgepatch-p23-sm120"):  # the released one: rolled forward
        assert _tag_digest(registry.host, REPO, tag) == TinyImage.DIGEST
    for tag in ("p23-sm100-validated", "forgepatch-p23-sm100"):
        assert _tag_digest(registry.host, REPO, tag) is None
    assert not path.exists()
    err = capfd.readouterr().err
    assert f"completed an interrupted release of {RELEASED}: registry tag(s) {registry.host}/{REPO}:p23-sm120-validated" in err
    assert pending.recover(ledger) == []  # nothing left to do


@pytest.mark.parametrize("text, says", [
    ('{"format": "forgepatch-pending-tags/1", "ledger": "/l", "releases": {"forgepatch/p23/sm1', "line 1"),
    ("\xff\xfe", "not UTF-8"),
    ('{"format": "forgepatch-pending-tags/1", "ledger": "/l", "releases": []}', "no 'releases' table"),
    ('{"format": "forgepatch-ledger/1", "ledger": "/l", "releases": {}}', "is not a record of an interrupted"),
    ('{"format": "forgepatch-pending-tags/2", "ledger": "/l", "releases": {}}', "newer than this forgepatch reads"),
    ('{"format": "forgepatch-pending-tags/1", "ledger": "/l", "releases": {"t": {"tags": ["x"]}}}', "releases.t.digest"),
    ('{"format": "forgepatch-pending-tags/1", "ledger": "/l", "releases": {"t": {"digest": "repo:tag", "tags": ["x"]}}}',
     "is not REPO@sha256"),
    ('{"format": "forgepatch-pending-tags/1", "ledger": "/l", "releases": {"t": {"digest": "r@sha256:' + "0" * 64
     + '", "tags": "x"}}}', "releases.t.tags"),
])
def test_a_record_that_does_not_read_stops_the_release_with_one_line_and_is_left(ledger, text, says):
    path = pending._path(ledger)
    path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    with pytest.raises(BadInput) as exc:
        pending.recover(ledger)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and says in message, message
    assert message.endswith("inspect it, then remove it"), message
    assert path.read_bytes() == (text.encode("latin-1") if text.startswith("\xff") else text.encode())
