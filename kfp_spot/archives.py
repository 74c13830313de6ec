"""Unpack a tar member with tarfile's ``data`` filter rules, on every Python kfp-spot runs on.

The extraction filters (PEP 706) came in Python 3.10.12 and 3.11.4. The runtime image's Python is
Debian's 3.11.2, which has none (``extract(..., filter="data")`` is a ``TypeError`` there), and so
may a user's. Where the filter is missing, :func:`extract_member` applies the same rules itself
first: no absolute name, nothing written outside the destination, links only to places inside it
and never absolute, no device files or FIFOs, no setuid/setgid/sticky bits and no group or other
write bits, the archive's owners ignored. Either way a refused member raises
:class:`UnsafeMemberError`, whose message says what is wrong with it.
"""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import Path

__all__ = ["ArchiveError", "UnsafeMemberError", "checked_member", "extract_member", "unpack_sdist"]


class ArchiveError(ValueError):
    """An archive cannot be unpacked (the message says why)."""


class UnsafeMemberError(ArchiveError):
    """A tar member the ``data`` filter refuses (the message names it and why)."""


# The filter's own errors, where this Python has them.
_FILTER_ERRORS: tuple[type[Exception], ...] = (
    (tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ()
)


def extract_member(tf: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    """Write ``member`` of ``tf`` under ``dest`` as the ``data`` filter allows.

    Raises:
        UnsafeMemberError: the member is refused; nothing of it is written.
    """
    if hasattr(tarfile, "data_filter"):
        try:
            tf.extract(member, dest, filter="data")
        except _FILTER_ERRORS as exc:
            raise UnsafeMemberError(str(exc)) from None
        return
    tf.extract(checked_member(member, dest), dest)


def checked_member(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """``member`` as the ``data`` filter would extract it into ``dest`` (a copy), or an error.

    The rules of :func:`tarfile.data_filter`, for a Python without it.

    Raises:
        UnsafeMemberError: naming the member and the rule it breaks.
    """
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([os.path.realpath(path), root]) == root

    name = member.name.lstrip("/" + os.sep)
    if os.path.isabs(name):
        raise UnsafeMemberError(f"{member.name!r} has an absolute path")
    if not inside(os.path.join(root, name)):
        raise UnsafeMemberError(f"{member.name!r} would be extracted outside the destination")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeMemberError(f"{member.name!r} is a special file")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise UnsafeMemberError(f"{member.name!r} is a link to an absolute path")
        base = os.path.join(root, os.path.dirname(name)) if member.issym() else root
        if not inside(os.path.join(base, member.linkname)):
            raise UnsafeMemberError(f"{member.name!r} is a link to a path outside the destination")
    out = copy.copy(member)
    out.name = name
    if member.isreg() or member.islnk():
        mode = (member.mode & 0o755) | 0o600  # no setuid/setgid/sticky, no group/other write
        if not mode & 0o100:
            mode &= ~0o111  # executable only where the owner may run it
        out.mode = mode
    elif member.isdir():
        out.mode = 0o755
    # The archive's owners are not this machine's: what is written belongs to whoever unpacks.
    out.uid, out.gid, out.uname, out.gname = os.getuid(), os.getgid(), "", ""
    return out


def unpack_sdist(sdist: Path, into: Path) -> Path:
    """Unpack the source distribution ``sdist`` into ``into``; returns its top-level directory.

    ``into`` is made if missing; every member is written by the ``data`` filter's rules.

    Raises:
        ArchiveError: it is not a readable tar archive, a member is refused
            (:class:`UnsafeMemberError`), or it does not hold exactly one top-level directory.
    """
    try:
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            for member in archive:
                extract_member(archive, member, into)
    except (tarfile.TarError, OSError) as exc:
        raise ArchiveError(str(exc)) from None
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise ArchiveError("it does not hold one top-level directory")
    return tops[0]
