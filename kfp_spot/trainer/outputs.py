"""Where a training job writes: its checkpoint root and its model directory.

Vertex AI tells a CustomJob where to write through ``AIP_CHECKPOINT_DIR`` and ``AIP_MODEL_DIR``
(set from the job's ``baseOutputDirectory``); a trainer's ``--checkpoint-dir``/``--model-dir``
override them. A ``gs://`` directory becomes its Cloud Storage FUSE path (``/gcs/BUCKET/...``)
where the bucket is mounted, as it is on Vertex AI's training VMs, so the trainer writes with
plain file I/O and needs no Cloud Storage client library (gcsfs) there; elsewhere (your machine,
the emulator) it stays ``gs://`` and fsspec/gcsfs serve it.

:class:`~kfp_spot.trainer.CheckpointManager`, every framework integration and
:mod:`~kfp_spot.trainer.integrations.directory` map their roots themselves; the helpers here are
for a trainer's command line::

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    add_output_dir_arguments(parser)          # --checkpoint-dir, --model-dir
    args = parser.parse_args()
    resolve_output_dirs(parser, args)         # from the variables if not given; mapped; or exit 2
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from kfp_spot import fs

if TYPE_CHECKING:  # argparse is the caller's: importing it here would only slow the import
    import argparse

CHECKPOINT_DIR_ENV = "AIP_CHECKPOINT_DIR"
"""The variable Vertex AI sets to the job's checkpoint directory (``<base>/checkpoints/``)."""
MODEL_DIR_ENV = "AIP_MODEL_DIR"
"""The variable Vertex AI sets to the job's model directory (``<base>/model/``)."""


class OutputDirs(NamedTuple):
    """A trainer's output directories, ready to use (``gs://`` mapped to the mount if present)."""

    checkpoint_dir: str
    model_dir: str


def as_text(value: object) -> object:
    """A path-like value (a ``pathlib.Path``) as its ``str``; anything else as it is."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def checkpoint_root(
    root: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> str:
    """The checkpoint root to use: ``root``, else ``$AIP_CHECKPOINT_DIR``; mapped to the mount.

    Args:
        root: a local path (``str`` or ``pathlib.Path``), ``file://`` URL or ``gs://`` URI;
            None reads the variable. A local path's leading ``~`` is the home directory.
        environ: the environment to read (default ``os.environ``).

    Returns:
        The root; a relative local path made absolute against the working directory now.

    Raises:
        ValueError: neither is set, ``root`` is not a non-empty string, it is (or lies
            under) a local file, or its ``~`` names no home directory (the message says which).
    """
    env = os.environ if environ is None else environ
    given = root is not None
    root = as_text(root)  # type: ignore[assignment]  # a pathlib.Path is a path too
    if root is None:
        root = env.get(CHECKPOINT_DIR_ENV)
        if not root:
            raise ValueError(
                f"root: no checkpoint root given and ${CHECKPOINT_DIR_ENV} is not set; pass "
                "root='gs://bucket/run/checkpoints' (or a local path) or set the variable"
            )
    if not isinstance(root, str) or not root.strip():
        raise ValueError(f"root must be a non-empty path or URI, got {root!r}")
    _refuse_scheme_typo(root, "root")
    mapped = fs.mounted_path(expand_home(root, "root").rstrip("/"))
    if "://" not in mapped and not os.path.isabs(mapped):
        # Resolved once, here: a relative root followed the training code's later chdir (or a
        # background save's, after it), and split the run's steps and records between folders.
        mapped = os.path.abspath(mapped)
    _refuse_file(mapped, root, "root")
    if given:
        _warn_off_the_job(mapped, env.get(CHECKPOINT_DIR_ENV))
    return mapped


def _warn_off_the_job(root: str, job_dir: str | None) -> None:
    """Warn of a local root outside the job's checkpoint directory, in a job that has one.

    A folder of the VM's disk goes with the VM at a preemption (Vertex AI restarts the job on new
    VMs), and the launcher and the evaluation read ``$AIP_CHECKPOINT_DIR``: such a root resumes
    nothing on Vertex AI, although a folder of this machine, ``/tmp/ckpt``, outlives a local
    attempt.
    """
    local = fs.to_local_path(root)
    if not job_dir or local is None or local.startswith(f"{fs.GCS_MOUNT_ROOT}/"):
        return
    job = fs.to_local_path(fs.mounted_path(os.path.expanduser(job_dir).rstrip("/")))
    if job is not None and (local == job or local.startswith(job.rstrip("/") + "/")):
        return
    import logging

    logging.getLogger(__name__).warning(
        "checkpoint root %s is a folder of this VM's disk outside $%s (%s): a preemption "
        "takes it with the VM, so the next attempt resumes nothing, and the launcher and "
        "evaluate_checkpoint look for checkpoints in $%s; leave the root unset (or pass that "
        "directory, or a gs:// URI)",
        root,
        CHECKPOINT_DIR_ENV,
        job_dir,
        CHECKPOINT_DIR_ENV,
    )


_FORMS = "gs://BUCKET/PATH or a local path"


def expand_home(path: str, what: str) -> str:
    """A local path's leading ``~`` (or ``~user``) as that home directory; other text unchanged.

    Python's file functions take ``~`` literally: ``~/ckpt`` became a folder named ``~`` in the
    working directory, not the folder of the home directory a shell (and fsspec's local paths)
    would give. Only a leading ``~`` is expanded; a URI (``gs://``, ``file://``) never is.

    Raises:
        ValueError: naming ``what`` when no home directory is known for it (``HOME`` unset and
            no such user).
    """
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        user = path[1:].split("/", 1)[0]
        whose = f"user {user!r} has" if user else "this process ($HOME unset) has"
        raise ValueError(
            f"{what}: {path!r} starts with ~, but {whose} no home directory to put there; "
            "give an absolute path"
        )
    return expanded


def _refuse_scheme_typo(value: str, what: str) -> None:
    """Refuse what would be a local folder named like a scheme, or a ``gs://`` without a bucket.

    ``gs:/BUCKET/PATH``, and a URI of another scheme than ``gs://`` or ``file://`` (``s3://``,
    ``GS://``), are read as local paths whose first folder is ``gs:``, ``s3:``: on the VM that
    folder is lost at the first preemption, so every attempt would train from zero.
    """
    text = value.strip()
    scheme, slashes, rest = text.partition("://")
    if slashes and _is_scheme(scheme) and scheme != "file":
        if scheme != "gs":  # s3://, gcs://, GS://: read as a local folder "s3:" on the VM
            raise ValueError(
                f"{what}: {value!r} is a {scheme}:// URI, which is read as a local folder named "
                f"{scheme + ':'!r} (lost with the VM at a preemption): Vertex AI's storage is "
                f"Cloud Storage; give {_FORMS}"
            )
        if not rest.split("/", 1)[0]:  # "gs://" alone, "gs:///path"
            raise ValueError(f"{what}: {value!r} names no bucket; give {_FORMS}")
    if text.rstrip("/") == "gs:":  # "gs://" alone
        raise ValueError(f"{what}: {value!r} names no bucket; give {_FORMS}")
    typo = fs.scheme_typo(text)
    if typo is not None:
        raise ValueError(f"{what}: {value!r} {typo}; give {_FORMS}")


def _is_scheme(text: str) -> bool:
    """Whether ``text`` is a URI scheme (RFC 3986: a letter, then letters, digits, ``+-.``)."""
    return (
        text[:1].isascii()
        and text[:1].isalpha()
        and all(c.isascii() and (c.isalnum() or c in "+-.") for c in text)
    )


def _refuse_file(path: str, value: str, what: str) -> None:
    """Refuse a local directory that is, or lies under, an existing file.

    Writing there fails on every save (after its retries), and late: at the first checkpoint,
    not when the trainer starts. A directory that does not exist yet is fine (it is created).
    """
    local = fs.to_local_path(path)
    if local is None:
        return
    here = local
    while not os.path.lexists(here):
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent
    if not os.path.isdir(here):
        where = "is not a directory" if here == local else f"lies under {here!r}, not a directory"
        raise ValueError(f"{what}: {value!r} {where} (a file?); give a directory to write in")


def check_writable(root: str, what: str = "root") -> None:
    """Refuse a local checkpoint root this process can neither create nor write in.

    Every save there would fail, each after its retries, and a periodic save that fails only
    logs: a run would train for hours without one checkpoint. The folders it creates to find
    out are removed again (the first save creates them); a ``gs://`` root is left to its first
    write.

    Raises:
        ValueError: naming the root and why (permission denied, read-only file system).
    """
    local = fs.to_local_path(root)
    if local is None:
        return
    import errno

    created = []
    here = local
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        created.append(here)
        here = os.path.dirname(here)
    try:
        os.makedirs(local, exist_ok=True)
    except OSError as exc:
        refused = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR)
        if exc.errno not in refused:
            raise
        reason = f"cannot be created: {exc.strerror}"
    else:
        # Cloud Storage FUSE decides writes itself, whatever mode bits it shows: not judged.
        fuse = local.startswith(f"{fs.GCS_MOUNT_ROOT}/")
        writable = fuse or os.access(local, os.W_OK | os.X_OK)
        for folder in created:  # innermost first; one another process wrote in stays
            try:
                os.rmdir(folder)
            except OSError:
                break
        if writable:
            return
        reason = "is not writable by this process (permissions, or a read-only file system)"
    raise ValueError(
        f"{what}: {root!r} {reason}; give a directory this process can write checkpoints in"
    )


def _directory(
    given: str | os.PathLike[str] | None,
    variable: str,
    what: str,
    option: str,
    env: Mapping[str, str],
) -> str:
    value = as_text(given) or env.get(variable)
    if not isinstance(value, str) or not value.strip():
        if value and not isinstance(value, str):
            raise ValueError(f"{what} directory ({option}): a path or URI, got {value!r}")
        raise ValueError(
            f"no {what} directory: set {variable} (Vertex AI sets it for a job with a base output "
            f"directory) or pass {option}"
        )
    named = f"{what} directory ({option} or ${variable})"
    _refuse_scheme_typo(value, named)
    mapped = fs.mounted_path(expand_home(value, named))
    _refuse_file(mapped, value, named)
    return mapped


def output_dirs(
    checkpoint_dir: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> OutputDirs:
    """The checkpoint and model directories: as given, else from Vertex AI's variables.

    Args:
        checkpoint_dir: overrides ``$AIP_CHECKPOINT_DIR``.
        model_dir: overrides ``$AIP_MODEL_DIR``.
        environ: the environment to read (default ``os.environ``).

    Returns:
        Both directories, a ``gs://`` one as its ``/gcs/...`` path where the bucket is mounted,
        a local one's leading ``~`` as the home directory.

    Raises:
        ValueError: one is neither given nor set, or is (or lies under) a local file; the
            message names the variable and the option.
    """
    env = os.environ if environ is None else environ
    return OutputDirs(
        _directory(checkpoint_dir, CHECKPOINT_DIR_ENV, "checkpoint", "--checkpoint-dir", env),
        _directory(model_dir, MODEL_DIR_ENV, "model", "--model-dir", env),
    )


def add_output_dir_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--checkpoint-dir`` and ``--model-dir`` (see :func:`resolve_output_dirs`)."""
    parser.add_argument(
        "--checkpoint-dir", default=None, help=f"default: ${CHECKPOINT_DIR_ENV} (set by Vertex AI)"
    )
    parser.add_argument(
        "--model-dir", default=None, help=f"default: ${MODEL_DIR_ENV} (set by Vertex AI)"
    )


def resolve_output_dirs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> OutputDirs:
    """Fill ``args.checkpoint_dir`` and ``args.model_dir`` with :func:`output_dirs`' answer.

    A missing directory is a usage error: ``parser.error`` prints it and exits with status 2.
    """
    try:
        dirs = output_dirs(args.checkpoint_dir, args.model_dir)
    except ValueError as exc:
        parser.error(str(exc))
    args.checkpoint_dir, args.model_dir = dirs
    return dirs
