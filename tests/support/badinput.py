"""Bad-input harness: a tiny real SGLang-shaped tree, a patch that applies to it, and an
in-process runner that tells a deliberate one-line error from an escaped exception."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

UTILS = '''\
import torch


def is_sm90_supported():
    return torch.cuda.get_device_capability()[0] == 9


def is_sm100_supported():
    return torch.cuda.get_device_capability()[0] == 10


def is_sm120_supported():
    return torch.cuda.get_device_capability()[0] == 12
'''

COMM = '''\
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def use_fusion(enabled):
    if enabled and (is_sm90_supported() or is_sm100_supported()):
        return True
    return False
'''

PATCH_TOML = '''\
id = "tiny-gate"
summary = "widen the tiny fusion gate"
arches = ["sm120", "sm121"]

[[sites]]
name = "fusion"
functions = ["use_fusion"]
modules = ["srt/comm.py"]
markers = ["is_sm100_supported"]
required = true

[[examples]]
name = "widened"
path = "srt/comm.py"
before = """
def use_fusion(enabled):
    return enabled
"""
'''

# the edit set a person accepted for PATCH_TOML on tiny_tree (written by `forgepatch patch lock`):
# a patch without a lock is `review` (nobody accepted its edits), test_edit_lock.py
PATCH_LOCK = '''\
# forgepatch edit lock of patch tiny-gate: the edit sets a person reviewed, per ARCH@VERSION.
# Written by `forgepatch patch lock` and `forgepatch apply --accept`; review changes to it like code.
format = 1
patch = "tiny-gate"

[[set]]
digest = "e5bc90cac19f"
accepted = ["sm120@0.5.23"]

[[set.edit]]
file = "srt/comm.py"
function = "<module>"
within = []
before = []
after = ["from sglang.srt.utils import is_sm120_supported"]

[[set.edit]]
file = "srt/comm.py"
function = "use_fusion"
within = []
before = ["if enabled and (is_sm90_supported() or is_sm100_supported())"]
after = ["if enabled and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported())"]
'''


def tiny_patch(patches: Path, text: str = PATCH_TOML) -> Path:
    """``patches/tiny-gate.toml`` (``text``) with its accepted lock; returns the patch's path."""
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "tiny-gate.lock").write_text(PATCH_LOCK)
    path = patches / "tiny-gate.toml"
    path.write_text(text)
    return path


MATRIX = '''\
default_pin = "rel"

[pins.rel]
pypi = "0.5.23"

[arches.sm120]
patches = ["tiny-gate"]
profiles = ["probe"]

[profiles.probe]
kind = "probe"
gpus = 1
timeout_s = 300

[smoke]
image_repo = "forgepatch-test/tiny"

[release]
tag_template = "forgepatch/{pin}/{arch}"
'''


def tiny_tree(root: Path) -> Path:
    """``root/sglang`` with a utils module and one fusion gate; returns root."""
    pkg = root / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "version.py").write_text('__version__ = "0.5.23"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "utils.py").write_text(UTILS)
    (pkg / "srt" / "comm.py").write_text(COMM)
    return root


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]


def run(*args: object) -> Result:
    """``forgepatch ARGS`` in this process; stdout and stderr captured."""
    from forgepatch.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return Result(rc, out.getvalue(), err.getvalue())


LOCATED = re.compile(r"^forgepatch: error: (?P<file>[^:]+):(?P<line>\d+): ")


def one_line_error(res: Result) -> str:
    """The error line of a failed run: exactly one line, the error prefix, no escaped
    exception (the last-resort handler's ``internal error``) and no traceback."""
    assert res.rc in (1, 2), (res.rc, res.err)
    assert len(res.lines) == 1, res.err
    line = res.lines[0]
    assert line.startswith("forgepatch: error: "), line
    assert "internal error" not in line and "Traceback" not in res.err and "rerun with --debug" not in line, line
    return line
