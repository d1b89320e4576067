"""The values the arch evaluator computes with: the device's compute capability, functions
and partials of the tree, UNKNOWN, a CUDA toolkit version, and three-valued (Kleene) truth.

Facts assumed, as a forgepatch image provides them: the platform is CUDA (``is_cuda()`` true,
``is_hip()``/``is_npu()``/... false) and the CUDA toolkit is new enough for the arch (any
comparison with ``torch.version.cuda`` or a ``cuda_version`` holds).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


class _Version:
    """A CUDA toolkit version: every comparison with it holds (assumed new enough)."""


VERSION: Any = _Version()

PLATFORM_TRUE = {"is_cuda", "_is_cuda", "is_cuda_alike", "_is_cuda_alike", "is_nvidia", "_is_nvidia", "is_available"}
PLATFORM_FALSE = {
    "is_hip", "_is_hip", "is_npu", "_is_npu", "is_xpu", "_is_xpu", "is_musa", "_is_musa", "is_mps", "_is_mps",
    "is_cpu", "_is_cpu", "is_hpu", "_is_hpu", "is_rocm", "_is_rocm", "is_mlx", "_is_mlx",
}
CAPABILITY_CALLS = {"get_device_capability": "cap", "get_device_properties": "cap", "get_device_sm": "sm",
                    "nvmlDeviceGetCudaComputeCapability": "cap"}
VERSION_NAMES = {"cuda_version", "CUDA_VERSION", "get_cuda_version", "_get_cuda_version", "get_nvcc_cuda_version"}


@dataclass(frozen=True)
class Cap:
    """A compute capability: ``(major, minor)``, ``.major``/``.minor``, ``[0]``/``[1]``."""

    major: int
    minor: int

    def tuple(self) -> tuple[int, int]:
        return (self.major, self.minor)


@dataclass(frozen=True)
class Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    file: str
    cls: str | None = None


@dataclass(frozen=True)
class Partial:
    func: Func
    kwargs: tuple[tuple[str, Any], ...]
    args: tuple[Any, ...] = ()  # ``partial(f, 12)``: bound before the call's own positionals


_FAMILY_NAME = re.compile(r"^_?is_sm(\d+)(\d)(?:_supported)?$")


def family_value(name: str, cc: tuple[int, int]) -> Any:
    """What an SGLang family predicate says on ``cc``, read from its name: ``is_sm100_supported``,
    ``_is_sm100_supported`` and ``is_sm100`` test the major version (10), as SGLang's
    definitions do (sm103 passes sm100 predicates, sm121 sm120 ones). UNKNOWN for any
    other name."""
    m = _FAMILY_NAME.match(name)
    if m is None:
        return UNKNOWN
    major, minor = int(m.group(1)), int(m.group(2))
    return cc[0] == major if minor == 0 else tuple(cc) == (major, minor)


def kleene_and(a, b):
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    return UNKNOWN


def kleene_or(a, b):
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    return UNKNOWN


def truth(value) -> Any:
    """True / False / UNKNOWN of a value."""
    if value is UNKNOWN or isinstance(value, (Func, Partial)):
        return UNKNOWN if value is UNKNOWN else True
    if value is VERSION:
        return True
    if isinstance(value, Cap):
        return True
    try:
        return bool(value)
    except Exception:
        return UNKNOWN


CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Div: operator.truediv}


def plain(value):
    """A Cap compares as its tuple."""
    return value.tuple() if isinstance(value, Cap) else value


def literal_table(node) -> bool:
    """A literal tuple/list/set/dict of constants (``_PINNED = {(9, 0): ...}``), not a flag."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(literal_table(e) or isinstance(e, ast.Constant) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and (literal_table(k) or isinstance(k, ast.Constant)) for k in node.keys)
    return False
