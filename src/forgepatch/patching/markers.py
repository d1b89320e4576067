"""What "this code names a marker" means: a code token, never a comment or a docstring.

A marker that is an identifier (``enable_flashinfer_allreduce_fusion``) matches a name in
the code (a variable, an attribute, a keyword argument, a function or parameter name) or a
whole word inside a string literal that is not documentation (a dict key, an error
message). A marker phrase (``FlashInfer allreduce fusion``) matches inside such a string.
A string that stands alone as a statement (a docstring, or text kept as a comment) is
documentation, and so are comments: neither makes a function a site.

The patch engine (libcst: ``codemods.base.node_names_any``) and the self-check (``lint``,
stdlib ``ast``) collect the tokens each their own way and decide with :func:`names_any`.
"""

from __future__ import annotations

import re
from typing import Iterable

_WORD = re.compile(r"\w+")


def is_word(marker: str) -> bool:
    return _WORD.fullmatch(marker) is not None


class Matcher:
    """``markers`` compiled once: does a name, or a string value, name one of them?"""

    def __init__(self, markers: Iterable[str]) -> None:
        markers = list(markers)
        self.words = {m for m in markers if is_word(m)}
        self._word_res = [(m, re.compile(rf"(?<!\w){re.escape(m)}(?!\w)")) for m in self.words]
        self._phrases = [m for m in markers if not is_word(m)]

    def name(self, name: str) -> bool:
        return name in self.words

    def string(self, value: str) -> bool:
        return any(p in value for p in self._phrases) or any(
            m in value and r.search(value) for m, r in self._word_res)


def names_any(names: set[str], strings: Iterable[str], markers: Iterable[str]) -> bool:
    """Do these code tokens (identifiers ``names``, non-doc string values ``strings``) name
    one of ``markers``?"""
    match = Matcher(markers)
    return bool(match.words & names) or any(match.string(s) for s in strings)
