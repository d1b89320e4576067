"""The probe and the server tier report the SGLang and FlashInfer their process actually
imported (issue 23): version and directory, as `forgepatch.inimage.imported` finds them
(`module.__file__`, the dist-info beside it); smoke records them in each job result; release
refuses a job that ran with another FlashInfer than the image's label names.

Real parts: the flashinfer-python 0.6.1 and 0.7.2 and SGLang 0.5.23 release trees (PyPI wheels,
cached), real interpreters resolving them from PYTHONPATH, the server driver and the local
runner through the CLI. The server is the stand-in launcher (tests/support/fake_sglang_server.py,
a labelled TEST DOUBLE: a real SGLang server needs a GPU and a model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from images_support import linked_copy
from support.smoke_matrix import ROOT, profile, run_cli, write_matrix


def fi_tree(version: str) -> Path:
    from forgepatch.sources import resolve_source

    return Path(resolve_source(f"pypi:flashinfer-python=={version}").package)


def install(home: Path, version: str) -> Path:
    """A flashinfer ``version`` install under ``home``: the release's package (linked) and its
    dist-info, as pip leaves them."""
    linked_copy(fi_tree(version), home / "flashinfer")
    info = home / f"flashinfer_python-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return home


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    root = tmp_path_factory.mktemp("imported")
    return install(root / "a", "0.6.1"), install(root / "b", "0.7.2")


def report(*path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *map(str, path)]))
    r = subprocess.run([sys.executable, "-m", "forgepatch.inimage.imported", "--json"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_report_names_the_flashinfer_the_interpreter_imports(homes):
    a, b = homes
    first = report(b, a)["flashinfer"]
    assert (first["version"], first["version_from"], first["dir"]) == ("0.7.2", "dist-info", str(b / "flashinfer"))
    other = report(a, b)["flashinfer"]
    assert (other["version"], other["dir"]) == ("0.6.1", str(a / "flashinfer"))
    # this interpreter has no torch: the import fails, the place and the version are still read
    assert other["imported"] is False and other["error"].startswith(("ModuleNotFoundError", "ImportError"))
    # a package the interpreter cannot find at all is None, never a guess
    assert report(a)["sglang"] is None


def test_server_jobs_record_what_they_imported_and_release_refuses_another_flashinfer(homes, tmp_path):
    a, b = homes
    matrix = write_matrix(tmp_path / "matrix.toml", {"ok": profile("ok", ["--tp-size 8"], timeout_s=60)}, sm103=["ok"])
    r = run_cli("--config", str(matrix), "smoke", "--runner", "local", "--json", "--logs", str(tmp_path / "logs"),
                "--pin", "p23", "--arch", "sm103", pythonpath=(b, a))
    assert r.returncode == 0, r.stderr[-3000:]
    [job] = json.loads(r.stdout)["jobs"]
    fi, sg = job["imported"]["flashinfer"], job["imported"]["sglang"]
    # the server process imported 0.7.2 (first on its path) and the local runner's SGLang tree
    assert (fi["version"], fi["dir"]) == ("0.7.2", str(b / "flashinfer"))
    assert sg["version"] == "0.5.23" and "/local-trees/" in sg["dir"] and sg["dir"].endswith("/sglang")
    log = Path(job["log_path"]).read_text()
    assert "[forgepatch-imported] " in log

    # release: an image whose label names flashinfer 0.6.1 is not what this job ran with
    from forgepatch.combination import LABEL, PackageIdentity, Upstream
    from forgepatch.combination.results import JobResult, imported_problems
    from forgepatch.release.check import _judge_profile
    from forgepatch.release.evidence import ImageFacts, ResultsFile

    def labels(fi_version: str) -> dict[str, str]:
        idents = [PackageIdentity("sglang", Upstream("pypi", "0.5.23", "a" * 64), "p1"),
                  PackageIdentity("flashinfer", Upstream("pypi", fi_version, "b" * 64), "p2")]
        return {LABEL["packages"]: "; ".join(i.to_label() for i in idents)}

    result = JobResult.model_validate(job)
    assert imported_problems(labels("0.7.2"), result.imported) == []
    [problem] = imported_problems(labels("0.6.1"), result.imported)
    assert problem == f"flashinfer: the job ran with 0.7.2 from {b / 'flashinfer'} (import failed: " \
                      f"{fi['error']}), the image's label names pypi:0.6.1"
    # as the docker runner records it: on that image, after it was created
    ran = result.model_copy(update={"image_id": "sha256:" + "c" * 64, "patchset": "ps"})
    image = ImageFacts("sha256:" + "c" * 64, datetime(2020, 1, 1, tzinfo=timezone.utc), labels("0.6.1"), [], "img:tag")
    from forgepatch.combination.results import SmokeResults

    f = ResultsFile(tmp_path / "results.json", b"", "0" * 64, SmokeResults(jobs=[ran]))
    reason, record = _judge_profile("ok", [(f, ran)], image, "ps")
    assert reason.code == "imported-packages" and record is None  # no evidence
    assert "ran with other packages than image img:tag carries: flashinfer: the job ran with 0.7.2" in reason.message
    image_ok = ImageFacts(image.id, image.created, labels("0.7.2"), [], "img:tag")
    assert _judge_profile("ok", [(f, ran)], image_ok, "ps")[0] is None


def test_the_probe_document_carries_what_it_imported(homes):
    """With a real (CPU) torch: the probe ends no-gpu, and its document names the FlashInfer
    that process imported (after torch)."""
    a, _ = homes
    site = os.environ.get("FORGEPATCH_TEST_TORCH") or str(Path.home() / ".cache" / "forgepatch" / "torch-cpu")
    if not Path(site, "torch").is_dir():
        pytest.fail("a CPU torch is required (tests/run.sh installs it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), site, str(a)]))
    r = subprocess.run([sys.executable, "-m", "forgepatch.inimage.probe", "--json"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 3, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    fi = doc["imported"]["flashinfer"]
    assert (doc["verdict"], fi["version"], fi["dir"]) == ("no-gpu", "0.6.1", str(a / "flashinfer"))
    assert doc["imported"]["sglang"] is None
    assert "[forgepatch-imported] " in r.stderr
