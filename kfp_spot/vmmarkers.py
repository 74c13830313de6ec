"""A package's declared requirements as pip on a training VM reads their markers.

pip evaluates a requirement's environment marker where it installs. On Vertex AI that is a
prebuilt image: Linux x86_64, the image's CPython (:func:`image_environment`). A package written
on a Mac may declare ``tensorflow-macos; sys_platform == "darwin"``, which pip on the VM skips,
or ``foo; sys_platform == "linux"``, which pip on the Mac skips. An environment made on this
machine for a job that runs on Vertex AI (the emulator's, the import check's, the evaluation's)
installs what :func:`for_vm` selects: each declared requirement whose marker holds on the VM,
with its marker resolved, and none whose marker holds here only.

Only the package's own requirements are read so: what they require in turn is resolved by pip
for this machine (the wheels installed here are this machine's builds, with their metadata).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName, default_environment
from packaging.requirements import InvalidRequirement, Requirement

__all__ = ["VmRequirements", "for_vm", "host_environment", "image_environment"]


def image_environment(python: str) -> dict[str, str]:
    """Marker values of a job in a prebuilt image (Linux x86_64, CPython ``python``).

    ``python_full_version`` is the minor version's first release: the images' patch releases are
    not recorded. :func:`for_vm` leaves a marker whose outcome depends on it to pip.
    """
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",  # the package is installed without extras
    }


def host_environment() -> dict[str, str]:
    """Marker values of this interpreter, as pip here reads them (no extra asked for)."""
    return {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}


@dataclass(frozen=True)
class VmRequirements:
    """What :func:`for_vm` found.

    Attributes:
        install: the requirements pip on the VM installs, each without its marker (resolved for
            the VM), in their declared order; one whose marker cannot be evaluated keeps it (pip
            decides).
        vm_only: declared requirements installed on the VM and skipped by pip here.
        host_only: declared requirements pip here would install and the VM skips.
    """

    install: tuple[str, ...]
    vm_only: tuple[str, ...]
    host_only: tuple[str, ...]


def _holds(
    requirement: Requirement, environment: Mapping[str, str], extras: tuple[str, ...]
) -> bool | None:
    """Whether ``requirement``'s marker holds in ``environment``, with no extra or one of these.

    None: it cannot be evaluated.
    """
    if requirement.marker is None:
        return True
    try:
        return any(requirement.marker.evaluate({**environment, "extra": e}) for e in ("", *extras))
    except (UndefinedComparison, UndefinedEnvironmentName):
        return None


def _last_patch(environment: Mapping[str, str]) -> Mapping[str, str]:
    """``environment`` at its minor version's last patch release, where it gives the first."""
    minor = environment.get("python_version", "")
    if environment.get("python_full_version") != f"{minor}.0":
        return environment  # a known patch release (this machine's)
    return {**environment, "python_full_version": f"{minor}.{2**31 - 1}"}


def for_vm(
    requirements: Iterable[str],
    vm: Mapping[str, str],
    host: Mapping[str, str],
    *,
    extras: Iterable[str] = (),
) -> VmRequirements:
    """The requirements pip installs on the VM (``vm``'s marker values), compared with ``host``.

    ``extras``: the extras the distribution declaring ``requirements`` is installed with (a job's
    package is installed with none; another package of the job may ask for one of its extras).
    A requirement that is not PEP 508 is passed on as it is (pip refuses it, as on the VM).
    """
    asked = tuple(sorted(extras))
    install: list[str] = []
    vm_only: list[str] = []
    host_only: list[str] = []
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            install.append(text)
            continue
        there, here = _holds(requirement, vm, asked), _holds(requirement, host, asked)
        if there is not None and _holds(requirement, _last_patch(vm), asked) is not there:
            there = None  # python_full_version decides it, and the image's patch is not known
        if there is None:
            install.append(text)
            continue
        if there and here is False:
            vm_only.append(text)
        elif not there and here:
            host_only.append(text)
        if there:
            requirement.marker = None
            install.append(str(requirement))
    return VmRequirements(tuple(install), tuple(vm_only), tuple(host_only))
