"""Branch, image-tag and release-tag names are made in one module (``combination``), and
the release tag's form (what the integrity check calls "a tag of the template's form") is
read off the same template that makes the tags."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from forgepatch.combination import (RELEASE_TAG_TEMPLATE, branch_name, image_tag, release_tag, release_tag_form)

_word = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True)
_text = st.from_regex(r"[A-Za-z0-9._/-]{0,8}", fullmatch=True)


@given(st.lists(st.tuples(_text, st.sampled_from(["{pin}", "{arch}"])), min_size=1, max_size=3), _text, _word, _word)
def test_every_tag_a_template_makes_is_of_its_form(parts, tail, pin, arch):
    template = "".join(t + p for t, p in parts) + tail
    tag = release_tag(template, pin, arch)
    assert release_tag_form(template).fullmatch(tag), (template, tag)


def test_the_shipped_orders_and_a_bad_template():
    assert branch_name("sm120", "v0.5.23") == "forgepatch/sm120/v0.5.23"
    assert release_tag(RELEASE_TAG_TEMPLATE, "v0.5.23", "sm120") == "forgepatch/v0.5.23/sm120"
    assert image_tag("v0.5.23", "sm120", "validated") == "v0.5.23-sm120-validated"
    assert not release_tag_form(RELEASE_TAG_TEMPLATE).fullmatch("forgepatch/v0.5.23/sm120/x")
    with pytest.raises(ValueError, match=r"tag_template 'x/\{nope\}': 'nope' \(placeholders: \{pin\} \{arch\}\)"):
        release_tag("x/{nope}", "p", "a")
