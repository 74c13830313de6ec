"""Where the steps of a checkpoint root are, and listing them (local disks and ``gs://``)."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from typing import Any

from kfp_spot import fs
from kfp_spot.checkpoints.numeric import whole_number

STEP_RE = re.compile(r"^step-(0|[1-9][0-9]*)$")
"""A step's directory name as :func:`step_dir` writes it: ASCII digits, no leading zero, so one
step has one name (``step-0003`` or ``step-٣`` is someone else's folder, never step 3's)."""


def storage_errors(*also: type[BaseException]) -> tuple[type[BaseException], ...]:
    """Errors reading or writing a checkpoint root may raise: OSError, gcsfs's and aiohttp's.

    gcsfs's and aiohttp's classes are looked up once those modules are loaded, never imported;
    so is ``asyncio.TimeoutError`` (fsspec's ``FSTimeoutError``, a bounded listing that got no
    answer), which is an ``OSError`` only from Python 3.11 on.

    Args:
        also: more exception classes to catch with them (one tuple for an ``except`` clause).
    """
    found: list[type[BaseException]] = [OSError, *also]
    for module, name in (
        ("gcsfs.retry", "HttpError"),
        ("gcsfs.retry", "ChecksumError"),
        ("aiohttp", "ClientError"),
        ("asyncio", "TimeoutError"),
    ):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


_CAUSES = {
    errno.ENOSPC: "the disk is full: free space on it, or save less state",
    errno.EDQUOT: "the disk quota is used up: free space, or save less state",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
}


def explained_storage_error(
    exc: BaseException, what: str, after: str, filename: str | None = None
) -> OSError | None:
    """``exc`` (an OSError with an errno) again, of its type and errno, saying what failed.

    A bare ``[Errno 28] No space left on device`` names neither the checkpoint nor what is
    left: the message becomes ``<what>: <the cause in words> (<strerror>); <after>``. None for
    other errors (gcsfs's name the object already), which the caller raises as they are.

    Args:
        exc: the error.
        what: what failed (the step and the file).
        after: what it means for the checkpoints, and what to do.
        filename: the file to name, where ``exc`` names none (a failed read of an open file).
    """
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    cause = _CAUSES.get(exc.errno)
    said = exc.strerror or str(exc)
    message = f"{what}: {cause} ({said}); {after}" if cause else f"{what}: {said}; {after}"
    try:
        return type(exc)(exc.errno, message, exc.filename or filename)
    except TypeError:  # a subclass with a constructor of its own
        return None


_UNREADABLE = (
    "an error of the storage, not a damaged checkpoint: no older step is restored in its place "
    "and none is deleted; restore again once the file can be read, or move its step directory "
    "away to resume from the step before it"
)


def unreadable(exc: OSError, what: str, path: str) -> OSError:
    """``exc`` again, naming the step file it failed to read and saying that it is no damage.

    A file that is there but cannot be read (permission denied, an I/O error, a 403) says
    nothing of the checkpoint: readers raise this rather than fall back to an older step.
    """
    explained = explained_storage_error(exc, what, _UNREADABLE, filename=path)
    if explained is None and type(exc) is OSError:  # gcsfs's 403: no errno, a URL for a name
        explained = OSError(f"{what} ({path}): {exc}; {_UNREADABLE}")
    return explained or exc


def not_there(exc: OSError, path: str) -> bool:
    """Whether a failed open of ``path`` says that no file is there: damage, as a missing file.

    A symlink loop, a name too long for any step, or a path that is no regular file (a socket
    refuses its open with ENXIO); a file the storage will not open or describe is there.
    """
    if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:  # the storage refuses to say: never a reason to call it damage
        return False


MAX_STEP = 2**53 - 1
"""The largest step: every larger integer loses its value as a JSON number read as a double."""


def check_step(step: Any) -> int:
    """``step`` as an int when it is a step number: a whole number 0..:data:`MAX_STEP`, no bool.

    The one rule of a step a trainer passes (saving and restoring it): any integral type counts
    (``numpy.int64``, a framework's step counter), a float, a string or a bool does not.

    Raises:
        ValueError: naming the step given and what would be valid.
    """
    number = whole_number(step)
    if number is None:
        raise ValueError(
            "step must be a whole number >= 0 (an int, or an integral type such as "
            f"numpy.int64), got {step!r}"
        )
    if number < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    if number > MAX_STEP:
        raise ValueError(
            f"step must be at most {MAX_STEP} (2**53 - 1: a pipeline's metadata holds numbers as "
            f"doubles, and a larger step would come back as another), got {step!r}"
        )
    return number


def step_dir(root: str, step: int) -> str:
    """The directory (path or URI) of checkpoint ``step`` under ``root``."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return fs.join(root, f"step-{step}")


def list_names(uri: str) -> list[str]:
    """Entry names directly under ``uri`` ([] when it does not exist)."""
    local = fs.to_local_path(uri)
    if local is not None:
        try:
            return os.listdir(local)
        except (FileNotFoundError, NotADirectoryError):
            return []
    filesystem, path = fs.filesystem(uri)
    filesystem.invalidate_cache(path)  # another process (the previous attempt) wrote here
    try:
        entries = filesystem.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]


def list_steps(root: str) -> list[int]:
    """Every step directory under ``root``, committed or not, in ascending order."""
    steps = []
    for name in list_names(root):
        match = STEP_RE.fullmatch(name)
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def parse_step_dir(path: str) -> tuple[str, int]:
    """Split a ``.../step-<n>`` directory into its checkpoint root and step.

    Raises:
        ValueError: ``path`` does not end in ``step-<n>``.
    """
    stripped = path.rstrip("/") if fs.is_remote(path) else os.path.abspath(path)
    root, _, name = stripped.rpartition("/")
    match = STEP_RE.fullmatch(name)
    if not match or not root:
        raise ValueError(
            f"{path!r} is not a checkpoint step directory (<root>/step-<n>, n a whole number "
            "written without leading zeros, e.g. step-40)"
        )
    return root, int(match.group(1))


def stat_remote(base: str) -> dict[str, dict[str, Any]]:
    """Object name (relative to ``base``) -> metadata, in one listing request."""
    filesystem, path = fs.filesystem(base)
    filesystem.invalidate_cache(path)
    try:
        found = filesystem.find(path, detail=True)
    except FileNotFoundError:
        return {}
    prefix = path.rstrip("/") + "/"
    return {name[len(prefix) :]: info for name, info in found.items() if name.startswith(prefix)}
