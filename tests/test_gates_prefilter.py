"""The byte prefilter of `gates` (gates/scan.py `candidates`) on real release trees: the
whole-name search that finds where names derived from arch reads are used keeps exactly the
files a plain search per name keeps (0.5.10 and 0.5.23, the tree's own derived names and
other names it defines), for any bytes (hypothesis), and costs one pass per file whatever
the number of names (issue 22: `gates --rejecting` cold <= 2 s; it was a pass over the whole
tree per name)."""

from __future__ import annotations

import time
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.gates.index import Index
from forgepatch.gates.inventory import is_test
from forgepatch.gates.reads import ArchReads
from forgepatch.gates.scan import TOKENS, candidates, parse_file, read_tree


def _is_ident_byte(b: int) -> bool:
    return b == 95 or 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122 or b >= 128


def _holds_word(data: bytes, name: bytes) -> bool:
    """The oracle: ``name`` somewhere in ``data`` with no identifier byte on either side."""
    pos = data.find(name)
    while pos >= 0:
        end = pos + len(name)
        if (pos == 0 or not _is_ident_byte(data[pos - 1])) and (end == len(data) or not _is_ident_byte(data[end])):
            return True
        pos = data.find(name, pos + 1)
    return False


def _oracle(files: dict[str, bytes], names) -> list[str]:
    return [rel for rel, data in files.items() if any(_holds_word(data, n) for n in names)]


@lru_cache(maxsize=None)
def _tree(version: str):
    from forgepatch.sources import pypi_tree

    files = {rel: data for rel, data in read_tree(pypi_tree(version).package).items() if not is_test(rel)}
    parsed = [parse_file(rel, files[rel], TOKENS) for rel in candidates(files)]
    index = Index(parsed)
    public, _private = ArchReads(index).derived_names()
    return files, index, public


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_whole_name_search_keeps_every_file_a_search_per_name_keeps(version):
    files, index, public = _tree(version)
    derived = [n.encode() for n in public]
    assert derived, "the tree defines names from arch reads"
    # and names the tree defines that are not arch reads: a common one (`logger`), a dunder
    # one, every 40th of the module-level names in order
    others = sorted(index.defs)[::40] + ["logger", "_is_cuda", "__all__"]
    names = tuple(dict.fromkeys(derived + [n.encode() for n in others]))
    kept = candidates(files, names, whole_words=True)
    assert kept == _oracle(files, names)
    mine = candidates(files, tuple(derived), whole_words=True)
    assert mine == _oracle(files, derived)
    held = {rel: files[rel] for rel in mine}  # the others hold none of the names (just checked)
    for name in derived:  # one at a time: no file kept through another name
        assert candidates(held, (name,), whole_words=True) == _oracle(held, (name,)), name


_BYTES = st.binary(max_size=80) | st.lists(
    st.sampled_from([b"is_sm100", b"is_sm100_supported", b"_is_sm100", b"x", b" ", b"\n", b".", b"(", b"#", b'"',
                     b"\xc3\xa9", b"\xff", b"0", b"_", b"a.is_sm100()", b"is_sm1000"]), max_size=30).map(b"".join)
_NAMES = st.lists(st.sampled_from([b"is_sm100", b"is_sm100_supported", b"_is_sm100", b"x", b"_", b"a0"]),
                  min_size=1, max_size=4, unique=True).map(tuple)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["a.py", "b/c.py", "d.py"]), _BYTES, max_size=3), _NAMES)
def test_whole_name_search_is_a_whole_identifier_search(files, names):
    assert candidates(files, names, whole_words=True) == _oracle(files, names)


def test_whole_name_search_costs_one_pass_per_file_whatever_the_number_of_names():
    """33 names cost what one name costs (within 3x); a search per name over the tree cost
    ~30x. Measured side by side on the real 0.5.23 tree, best of 3 each."""
    files, _index, public = _tree("0.5.23")
    names = tuple(n.encode() for n in public)
    assert len(names) >= 20

    def best(keys) -> float:
        out = []
        for _ in range(3):
            t = time.perf_counter()
            candidates(files, keys, whole_words=True)
            out.append(time.perf_counter() - t)
        return min(out)

    one, many = best(names[:1]), best(names)
    assert many <= 3 * one, f"{len(names)} names {many:.3f} s vs one name {one:.3f} s"
