"""The image platforms ``build --platform`` takes, and the platform of an image or engine.

An image platform is Docker's ``OS/ARCH`` (``linux/amd64``, ``linux/arm64``); a wheel's and a
Python's machine is ``uname -m``'s (``x86_64``, ``aarch64``). SGLang ships wheels for these
two (DGX Spark, sm121, is ``linux/arm64``), so they are the platforms an image is built for.
"""

from __future__ import annotations

from forgepatch.errors import BadInput

# image platform -> the machine its Python reports (``platform.machine()``) and wheels name
MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
ALIASES = {"linux/arm64/v8": "linux/arm64", "linux/x86_64": "linux/amd64", "linux/aarch64": "linux/arm64"}


def check_platform(value: str, flag: str = "--platform") -> str:
    """``value`` as one of ``MACHINES`` (an alias such as ``linux/arm64/v8`` normalised);
    BadInput naming ``flag`` otherwise."""
    name = ALIASES.get(value.strip().lower(), value.strip().lower())
    if name not in MACHINES:
        raise BadInput(f"{flag}: {value!r} is not a platform forgepatch builds for (one of {', '.join(MACHINES)})")
    return name


def image_platform(inspect: dict) -> str:
    """``OS/ARCH`` of an image from ``docker inspect`` (Os, Architecture; amd64 if absent)."""
    os_name = inspect.get("Os") or "linux"
    arch = inspect.get("Architecture") or "amd64"
    return ALIASES.get(f"{os_name}/{arch}", f"{os_name}/{arch}")


def engine_platform(api) -> str:
    """``OS/ARCH`` of the Docker engine's own machine: what it runs without emulation."""
    version = api.version()
    return ALIASES.get(f"{version.get('Os', 'linux')}/{version.get('Arch', 'amd64')}",
                       f"{version.get('Os', 'linux')}/{version.get('Arch', 'amd64')}")


def check_base_platform(ref: str, inspect: dict, wanted: str) -> str:
    """The base's platform, which must be ``wanted`` (BadInput, one line, both named): an
    image built FROM it is of the base's platform whatever the build is asked for."""
    have = image_platform(inspect)
    if have != wanted:
        raise BadInput(f"base image {ref} is {have}, --platform is {wanted}: use a {wanted} base "
                       f"(`docker pull --platform {wanted} {ref}`, or another --base-image)")
    return have
