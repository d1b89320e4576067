"""Image references, parsed in one place (forgepatch.infra.refs), by Docker's rules."""

from __future__ import annotations

import pytest

from forgepatch.infra.refs import is_digest_ref, parse, parse_digest_ref
from forgepatch.errors import BadInput

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text, registry, path, tag, digest, host, api_path", [
    ("lmsysorg/sglang:latest", None, "lmsysorg/sglang", "latest", None, "registry-1.docker.io", "lmsysorg/sglang"),
    ("ubuntu", None, "ubuntu", None, None, "registry-1.docker.io", "library/ubuntu"),
    ("docker.io/library/ubuntu:22.04", None, "library/ubuntu", "22.04", None, "registry-1.docker.io", "library/ubuntu"),
    ("127.0.0.1:5000/forgepatch/sglang:v0.5.23-sm120", "127.0.0.1:5000", "forgepatch/sglang", "v0.5.23-sm120", None,
     "127.0.0.1:5000", "forgepatch/sglang"),
    (f"ghcr.io/my-org/sglang@{D}", "ghcr.io", "my-org/sglang", None, D, "ghcr.io", "my-org/sglang"),
    (f"localhost:5000/x:t@{D}", "localhost:5000", "x", "t", D, "localhost:5000", "x"),
    ("localhost/x", "localhost", "x", None, None, "localhost", "x"),
])
def test_parse(text, registry, path, tag, digest, host, api_path):
    ref = parse(text)
    assert (ref.registry, ref.path, ref.tag, ref.digest, ref.host, ref.api_path) == (registry, path, tag, digest, host, api_path)
    assert str(parse(str(ref))) == str(ref)


def test_loopback_and_auth_key():
    assert parse("127.0.0.1:5000/x").loopback and parse("localhost:5000/x").loopback
    assert not parse("ghcr.io/x").loopback and not parse("x/y").loopback
    assert parse("x/y").auth_key == "https://index.docker.io/v1/" and parse("ghcr.io/x").auth_key == "ghcr.io"
    assert parse("ghcr.io/o/x:t").with_digest(D).__str__() == f"ghcr.io/o/x@{D}"
    assert str(parse(f"ghcr.io/o/x@{D}").with_tag("v1")) == "ghcr.io/o/x:v1"


@pytest.mark.parametrize("text", ["", "UPPER/case", "x/y@sha256:abc", "x:-bad", "x/y:", "ghcr.io/", "a//b", "x y"])
def test_bad_refs_are_bad_input_naming_the_flag(text):
    with pytest.raises(BadInput) as exc:
        parse(text, "--image")
    assert str(exc.value).startswith("--image:") and "\n" not in str(exc.value)


def test_digest_required():
    assert parse_digest_ref(f"ghcr.io/o/x@{D}", "--image").digest == D
    with pytest.raises(BadInput, match="is a tag, not a digest"):
        parse_digest_ref("ghcr.io/o/x:v1", "--image")
    assert is_digest_ref(f"x@{D}") and not is_digest_ref("x:v1") and not is_digest_ref("x@sha256:12")


# -- references already held (engine, registry, documents): split by the same rules ----------
from hypothesis import given, strategies as st  # noqa: E402

from forgepatch.infra.refs import digest_of, repository, same_digest, split, split_tag  # noqa: E402

_component = st.from_regex(r"[a-z0-9]+(?:[._-][a-z0-9]+)?", fullmatch=True)
_registry = st.one_of(st.none(), st.sampled_from(["ghcr.io", "127.0.0.1:5000", "localhost:41547", "[::1]:5000"]))
_tag = st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True))
_digest = st.one_of(st.none(), st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True))


@given(_registry, st.lists(_component, min_size=1, max_size=3), _tag, _digest)
def test_split_agrees_with_parse_on_every_shape(registry, parts, tag, digest):
    """The lenient splitter (no validation) and the parser read every reference alike: a
    registry port's colon is never a tag, a digest is never a tag."""
    text = "/".join(([registry] if registry else []) + parts) + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    ref = parse(text)
    assert split(text) == (text.partition("@")[0].removesuffix(f":{tag}" if tag else ""), ref.tag, ref.digest)
    assert parse(repository(text)).name == ref.name
    assert split_tag(text)[1] == (tag or "latest") and digest_of(text) == digest


def test_split_keeps_a_registry_port_and_reads_digests():
    assert split_tag("127.0.0.1:5000/a/b") == ("127.0.0.1:5000/a/b", "latest")
    assert split_tag("127.0.0.1:5000/a/b:v1") == ("127.0.0.1:5000/a/b", "v1")
    assert repository(f"127.0.0.1:5000/a/b@{D}") == "127.0.0.1:5000/a/b"
    assert split_tag(f"127.0.0.1:5000/a/b@{D}") == ("127.0.0.1:5000/a/b", "latest")  # was ("…a/b@sha256", "abab…")
    assert same_digest(f"x/a@{D}", f"127.0.0.1:5000/b@{D}") and not same_digest(f"x@{D}", "x:v1")
    assert not same_digest("x:v1", "x:v1")  # a tag names no bytes
