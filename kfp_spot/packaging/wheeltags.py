"""Whether pip on Vertex AI installs a wheel: its tags against a Linux x86_64 CPython's.

A job's package URIs are installed by pip on its training VMs (Vertex AI's prebuilt images:
Linux x86_64, CPython of the image's version) and again in kfp-spot's runtime image for the
evaluation (Linux x86_64, CPython 3.11). pip refuses a wheel none of whose tags that interpreter
supports ("is not a supported wheel on this platform"), once the job's VMs have started. A wheel
built on a Mac (``macosx_14_0_arm64``), for Windows or for another Python installs here and in the
local emulator; :func:`unsupported_reason` names it before anything is staged.

The glibc version of a ``manylinux`` tag is not judged (any ``manylinux*_x86_64`` counts): the
images' glibc is not recorded in kfp-spot's table.
"""

from __future__ import annotations

import functools

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

_MANYLINUX = [
    *(f"manylinux_2_{minor}_x86_64" for minor in range(99, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]
"""The platform tags pip on Linux x86_64 takes (glibc not judged, see above)."""


@functools.cache
def supported_tags(python: str) -> frozenset[Tag]:
    """The tags pip on Linux x86_64 with CPython ``python`` (``"3.10"``) installs."""
    version = tuple(int(p) for p in python.split(".")[:2])
    return frozenset(
        {
            *cpython_tags(version, platforms=_MANYLINUX),
            *compatible_tags(version, f"cp{version[0]}{version[1]}", _MANYLINUX),
        }
    )


def _platforms(tags: frozenset[Tag]) -> str:
    """The platforms a wheel's tags name, for people: ``macOS arm64``, ``any``."""
    shown = set()
    for tag in tags:
        platform = tag.platform
        if platform.startswith("macosx_"):
            shown.add(f"macOS {platform.split('_', 3)[-1]}")
        elif platform.startswith("win"):
            shown.add("Windows")
        elif platform.startswith("musllinux"):
            shown.add("musl Linux")
        else:
            shown.add(platform)
    return ", ".join(sorted(shown))


def unsupported_reason(filename: str, python: str, where: str) -> str | None:
    """Why pip in ``where`` (Linux x86_64, CPython ``python``) refuses wheel ``filename``.

    None for a file that is no wheel (an sdist pip builds there) or one it installs.
    """
    if not filename.lower().endswith(".whl"):
        return None
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename as exc:
        return f"{filename!r} is not a valid wheel file name ({exc}): pip refuses it"
    if tags & supported_tags(python):
        return None
    shown = ", ".join(sorted(str(t) for t in tags)[:4])
    return (
        f"{filename!r} is a wheel for {_platforms(tags)} ({shown}): pip in {where} (Linux "
        f"x86_64, CPython {python}) refuses it as not a supported wheel on that platform, after "
        f"the job's VMs have started; give a manylinux x86_64 wheel for CPython {python} (pip "
        f"download --only-binary=:all: --platform manylinux2014_x86_64 --python-version "
        f"{python} NAME) or the package's sdist"
    )
