"""The public API for patch authors: ``from forgepatch.patching import SiteCodemod, ...``
resolves lazily (no libcst at import) and a custom patch written against it works."""

from __future__ import annotations

import subprocess
import sys

from support.forkcli import run_inprocess


def test_public_names_resolve_lazily():
    code = ("import sys, forgepatch.patching as p; assert 'libcst' not in sys.modules; "
            "from forgepatch.patching import SiteCodemod, FileContext, Status, insert_definition, load_series; "
            "import forgepatch.patching.codemods.base as b; assert p.SiteCodemod is b.SiteCodemod; print(sorted(p.__all__))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", "from forgepatch.patching import NoSuchName"], capture_output=True, text=True)
    assert r.returncode == 1 and "cannot import name 'NoSuchName'" in r.stderr


def test_a_custom_patch_on_the_public_api_passes_its_examples(tmp_path, capsys):
    from forgepatch.paths import SHIPPED_PATCHES

    src = (SHIPPED_PATCHES / "sm103-ep-cuda-graph-guard.py").read_text()
    public = src.replace("from forgepatch.patching.codemods.base import SiteCodemod, insert_definition\n", "")
    public = public.replace("from forgepatch.patching.model import Status\n",
                            "from forgepatch.patching import SiteCodemod, Status, insert_definition\n")
    assert "forgepatch.patching.codemods" not in public and "from forgepatch.patching import" in public
    (tmp_path / "sm103-ep-cuda-graph-guard.py").write_text(public)
    rc, out, err = run_inprocess(capsys, "--patches", tmp_path, "patch", "test")
    assert rc == 0, out + err
    assert out.count("ok   sm103-ep-cuda-graph-guard") >= 2
