"""TEST DOUBLE of torch for the probe's CI tests: a "GPU machine" whose devices and arch list
come from environment variables, so the probe's device-dependent decisions (incompatible arch,
``--gpus`` larger than the machine) can be exercised without a GPU. It runs no kernels; the
real checks ran on real H200s (docs/gpu-runs/).

FAKE_TORCH_CC: comma-separated compute capabilities, one per device ("9.0,9.0").
FAKE_TORCH_ARCH_LIST: space-separated arch list ("sm_80 sm_90").
"""

import os
from types import SimpleNamespace

__version__ = "0.0.0+testdouble"
version = SimpleNamespace(cuda="13.0")


def _ccs():
    return [tuple(int(x) for x in cc.split(".")) for cc in os.environ.get("FAKE_TORCH_CC", "9.0").split(",") if cc]


class _Cudnn:
    @staticmethod
    def is_available():
        return False


backends = SimpleNamespace(cudnn=_Cudnn())


class _Cuda:
    nccl = SimpleNamespace(version=lambda: (2, 28, 9))

    @staticmethod
    def is_available():
        return bool(_ccs())

    @staticmethod
    def device_count():
        return len(_ccs())

    @staticmethod
    def get_device_properties(i):
        major, minor = _ccs()[i]
        return SimpleNamespace(name="Test Double GPU", major=major, minor=minor,
                               total_memory=80 * 2**30, multi_processor_count=132)

    @staticmethod
    def get_arch_list():
        return os.environ.get("FAKE_TORCH_ARCH_LIST", "sm_90").split()


cuda = _Cuda()
