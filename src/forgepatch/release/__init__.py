"""Release tagging of validated combinations.

A combination is (pin, arch, patchset hash, image id, required flag profiles). It is
releasable only when every required profile passed in smoke results recorded for exactly
that image id and patchset hash, the results are not older than the image, and the fork
branch was made with the patch files as they are now. Then it gets an annotated git tag on
the fork branch head, a ``validated`` image tag and an entry in the append-only ledger.

``evidence`` reads the facts (smoke results files, the fork branch, the image),
``combination`` judges them, ``publish`` writes the tag/image tag/ledger entry, ``verify``
re-checks a release, ``status`` renders the compatibility table.
"""
