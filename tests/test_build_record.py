"""The build record (forgepatch.combination.records): written by `build --record`, read by
`smoke --builds`; junk is one-line bad input naming the file."""

from __future__ import annotations

import json

import pytest

from forgepatch.combination.records import SCHEMA, Build, BuildRecord
from forgepatch.errors import BadInput
from forgepatch.smoke.builds import load_builds, use_builds
from forgepatch.smoke.jobs import JobSpec

D = "sha256:" + "cd" * 32


def build(arch="sm120", pin="v1", digest=f"127.0.0.1:5000/x@{D}") -> Build:
    return Build(arch=arch, pin=pin, image_id="sha256:" + "1" * 64, tag="127.0.0.1:5000/x:v1-sm120-abc", content_hash="abc",
                 digest=digest)


def test_round_trip_and_one_entry_per_pair(tmp_path):
    path = tmp_path / "b.json"
    rec = BuildRecord()
    rec.put(build())
    rec.put(build(pin="v2"))
    rec.put(build(digest=None))  # the same arch x pin again replaces the entry
    rec.write(path)
    back = BuildRecord.load(path)
    assert json.loads(path.read_text())["schema"] == SCHEMA
    assert [(b.pin, b.digest) for b in back.builds] == [("v2", f"127.0.0.1:5000/x@{D}"), ("v1", None)]
    other = tmp_path / "c.json"
    BuildRecord(builds=[build()]).write(other)
    assert load_builds([path, other]).find("sm120", "v1").digest == f"127.0.0.1:5000/x@{D}"  # a later file wins


@pytest.mark.parametrize("data, needle", [
    (b"{not json", "not a build record (line 1"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"schema": "forgepatch.smoke-results/2", "builds": []}', "is not a build record schema"),
    (b'{"schema": "forgepatch.build-record/9", "builds": []}', "newer than this forgepatch reads"),
    (b'{"schema": "forgepatch.build-record/1", "jobs": []}', "no 'builds' list"),
    (b'{"schema": "forgepatch.build-record/1", "builds": [{"arch": "sm120"}]}', "builds.0.pin"),
])
def test_junk_is_one_line_bad_input(tmp_path, data, needle):
    path = tmp_path / "b.json"
    path.write_bytes(data)
    with pytest.raises(BadInput) as exc:
        BuildRecord.load(path)
    assert str(exc.value).startswith(str(path)) and needle in str(exc.value) and "\n" not in str(exc.value)


def test_smoke_takes_digests_only(tmp_path):
    spec = JobSpec("sm120-v1-ok", "sm120", "v1", "ok", "command", ["true"])
    path = tmp_path / "b.json"
    BuildRecord(builds=[build(digest="127.0.0.1:5000/x:v1-sm120")]).write(path)
    with pytest.raises(BadInput, match="is a tag, not a digest"):
        use_builds([spec], [path])
    BuildRecord(builds=[build(digest=None)]).write(path)
    with pytest.raises(BadInput, match="was not pushed"):
        use_builds([spec], [path])
    BuildRecord(builds=[build(pin="v2")]).write(path)
    with pytest.raises(BadInput, match="has no build of sm120/v1"):
        use_builds([spec], [path])
    BuildRecord(builds=[build()]).write(path)
    use_builds([spec], [path])
    assert spec.image == f"127.0.0.1:5000/x@{D}"


def test_an_audit_of_no_cuda_library_says_so():
    """An image without any CUDA library passes the audit vacuously: its line says that no
    kernel was checked, never just "pass"."""
    from forgepatch.combination.records import AuditSummary

    none = AuditSummary(arch="sm120", verdict="pass", failing=[], cuda_libraries=0)
    assert none.line() == "pass for sm120 (no CUDA library in the image: no kernel was checked)"
    some = AuditSummary(arch="sm120", verdict="pass", failing=[], cuda_libraries=2)
    assert some.line() == "pass for sm120 (2 CUDA libraries)"
