"""Checkpoints that a framework writes itself, committed as kfp-spot steps.

orbax, torch DCP, Hugging Face, Lightning or a script of your own write a directory (or one file)
in their own format. Two calls make such a directory a kfp-spot step, so it gets what every
kfp-spot checkpoint has (a manifest that is the commit, verification before anyone loads it, the
launcher's and the evaluator's view of the newest step)::

    from kfp_spot.trainer.integrations.directory import commit_directory, latest_directory

    latest = latest_directory(root)                 # newest committed step, verified, or None
    state = restore_my_way(latest.path) if latest else init()
    ...
    step_path = step_directory(root, step)          # write straight into <root>/step-<n> ...
    orbax_checkpointer.save(step_path, state)
    commit_directory(root, step)                    # ... and commit it there (hash, manifest)
    # or: commit_directory(root, step, source="/tmp/my-ckpt")   copies it in, then commits

A :class:`~kfp_spot.trainer.CheckpointManager` does the same with ``ckpt.save_directory(step,
source)``, adding its interval, retention and attempt records.

The step's manifest records ``"layout": "directory"``: the files are the framework's, to be read
back by the framework (kfp-spot's state adapters are not involved).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints import CheckpointCorruptError, Manifest
from kfp_spot.checkpoints.paths import check_step, stat_remote
from kfp_spot.trainer.outputs import as_text, checkpoint_root, expand_home

log = logging.getLogger(__name__)

LAYOUT = "directory"
"""``manifest.metadata["layout"]`` of a step whose files a framework wrote."""


@dataclass(frozen=True)
class CommittedDirectory:
    """A committed step of a framework's own files, verified and on a local disk.

    Attributes:
        step: the step.
        path: a local directory holding exactly the files its manifest lists (the step directory
            itself for a local root; a verified download for ``gs://``).
        manifest: its manifest.
        root: the checkpoint root it came from.
    """

    step: int
    path: str
    manifest: Manifest
    root: str

    def file(self, name: str) -> str:
        """The local path of file ``name`` of the step."""
        return os.path.join(self.path, *name.split("/"))

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics saved with the step."""
        return dict(self.manifest.metadata.get("metrics") or {})


def layout_metadata(
    metrics: Mapping[str, Any] | None = None, attempt_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Manifest metadata of a framework-written step."""
    return {"layout": LAYOUT, "metrics": dict(metrics or {}), "attempt_id": attempt_id, **extra}


def _root(root: str) -> str:
    """``root`` without a trailing ``/``, through the Cloud Storage FUSE mount where it exists."""
    return checkpoint_root(root)


def step_directory(root: str, step: int) -> str:
    """Where step ``step`` lives (``<root>/step-<n>``): write a framework's files there.

    For a ``gs://`` root whose bucket is mounted (Vertex AI's ``/gcs``), the mounted path.
    """
    return checkpoints.step_dir(_root(root), step)


def _inside(path: str, parent: str) -> bool:
    path, parent = os.path.realpath(path), os.path.realpath(parent)
    return path == parent or path.startswith(parent + os.sep)


def _walk(source: str) -> list[tuple[str, str]]:
    """(relative posix name, absolute path) of every file under ``source``, sorted."""
    if os.path.isfile(source):
        return [(os.path.basename(source), source)]
    out = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, source).replace(os.sep, "/"), full))
    return sorted(out)


@contextlib.contextmanager
def mapped_files(source: str, step_path: str | None = None) -> Iterator[dict[str, Any]]:
    """The files under a local ``source`` as read-only memory maps (relative name -> buffer).

    Nothing is read into memory up front: writing and hashing them pages the files in, so a
    checkpoint larger than RAM can be committed. The maps are closed on exit.

    Args:
        source: a local directory or file the framework wrote.
        step_path: the step directory the files go to; ``source`` must not be inside it (the
            commit clears it first).

    Raises:
        ValueError: ``source`` is remote, missing, empty, or inside ``step_path``.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be a local directory or file, got {source!r}")
    local = fs.to_local_path(os.fspath(source))
    if local is None:
        raise ValueError(
            f"source {source!r} is remote: write the framework's files to a local directory "
            "(or straight into the step directory and use commit_directory(root, step))"
        )
    if not os.path.exists(local):
        raise ValueError(f"source {source!r} does not exist")
    step_local = fs.to_local_path(step_path) if step_path else None
    if step_local and _inside(local, step_local):
        raise ValueError(
            f"source {source!r} is the step directory itself: commit it in place with "
            "commit_directory(root, step), or write the files elsewhere"
        )
    files = _walk(local)
    if not files:
        raise ValueError(f"source {source!r} holds no files: nothing to commit")
    maps: list[mmap.mmap] = []
    views: dict[str, Any] = {}
    try:
        for name, path in files:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size == 0:
                    views[name] = b""
                    continue
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            maps.append(mapped)
            views[name] = memoryview(mapped)
        yield views
    finally:
        for view in views.values():
            if isinstance(view, memoryview):
                view.release()
        for mapped in maps:
            with contextlib.suppress(BufferError):  # a caller kept a view: GC closes it later
                mapped.close()


def _fsync_files(local: str, names: list[str]) -> None:
    """Fsync every file and its directory: the data reaches the disk before a manifest names it."""
    for name in names:
        with open(os.path.join(local, *name.split("/")), "rb") as handle:
            os.fsync(handle.fileno())
    for directory in sorted({os.path.dirname(os.path.join(local, n)) for n in names}):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _is_manifest_file(name: str) -> bool:
    """The manifest, or a temp file of one being written (``fs.atomic_write``'s name)."""
    manifest = checkpoints.MANIFEST_NAME
    return name == manifest or fs.is_atomic_temp(name, manifest)


def _commit_in_place(root: str, step: int, metadata: dict[str, Any]) -> Manifest:
    base = checkpoints.step_dir(root, step)
    local = fs.to_local_path(base)
    if local is None:
        filesystem, path = fs.filesystem(base)
        manifest_path = fs.filesystem(fs.join(base, checkpoints.MANIFEST_NAME))[1]
        with contextlib.suppress(FileNotFoundError):
            filesystem.rm_file(manifest_path)  # re-committing: the step is uncommitted meanwhile
        filesystem.invalidate_cache(path)
    else:  # plain file I/O: a local or /gcs-mounted root never needs fsspec
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(local, checkpoints.MANIFEST_NAME))
    # Every file the framework wrote, hidden ones too (torch DCP's ".metadata", zarr's
    # ".zarray"): commit_files' default leaves dotfiles out, and a step restored from gs://
    # would come down without them. Only a manifest's own temp files are left out.
    names: list[str] = []
    if local is not None:
        if os.path.isdir(local):
            names = [name for name, _ in _walk(local) if not _is_manifest_file(name)]
        if names:
            _fsync_files(local, names)
    else:
        names = [name for name in stat_remote(base) if not _is_manifest_file(name)]
    try:
        return checkpoints.commit_files(root, step, names or None, metadata=metadata)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(
            f"{base} holds no files: write the framework's checkpoint there first "
            f"(step_directory(root, step) names it) ({exc})"
        ) from exc


def commit_directory(
    root: str,
    step: int,
    source: str | os.PathLike[str] | None = None,
    *,
    metrics: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Manifest:
    """Commit a framework's checkpoint directory (or file) as kfp-spot step ``step``.

    Args:
        root: the checkpoint root (local path, ``file://`` or ``gs://``), e.g.
            ``$AIP_CHECKPOINT_DIR``; a ``gs://`` root goes through the ``/gcs`` mount if present.
        step: the training step it captures (>= 0).
        source: a local directory or file to copy in; None: the files are already in
            ``<root>/step-<n>`` (written there by the framework) and are committed in place.
        metrics: small JSON facts (loss, accuracy) kept in the manifest.
        metadata: more facts for the manifest (``layout`` is always ``directory``).

    Returns:
        The committed manifest.

    Raises:
        ValueError: ``step`` is invalid, or there are no files to commit.
    """
    step = check_step(step)
    root = as_text(root)  # type: ignore[assignment]  # a pathlib.Path is a path too
    if not isinstance(root, str) or not root.strip():
        raise ValueError(f"root must be a non-empty path or URI, got {root!r}")
    root = _root(root)
    extra = dict(metadata or {})
    extra.pop("layout", None)
    full = layout_metadata(metrics, extra.pop("attempt_id", None), **extra)
    if source is None:
        manifest = _commit_in_place(root, step, full)
    else:
        given = expand_home(os.fspath(source), "source")  # ~/hf-out: the home directory's
        with mapped_files(given, checkpoints.step_dir(root, step)) as files:
            manifest = checkpoints.write_step(root, step, files, metadata=full)
    log.info("committed %s step %d (%d files)", root, step, len(manifest.files))
    return manifest


def _download(root: str, step: int, manifest: Manifest, target: str) -> Manifest:
    base = checkpoints.step_dir(root, step)
    local_root = os.path.join(target, "checkpoints")
    for name in [*checkpoints.files_of(manifest), checkpoints.MANIFEST_NAME]:
        remote_fs, remote = fs.filesystem(fs.join(base, name))
        dest = os.path.join(local_root, f"step-{step}", *name.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            remote_fs.get_file(remote, dest)
        except FileNotFoundError as exc:
            raise CheckpointCorruptError(f"step {step}: file {name} is missing") from exc
    local = checkpoints.verify(local_root, step, check_hashes=True)
    if local.digest != manifest.digest:
        raise CheckpointCorruptError(f"step {step}: the manifest changed while it was downloaded")
    return local


def committed_directory(
    root: str, step: int, *, download_to: str | None = None
) -> CommittedDirectory:
    """Verify step ``step`` and return it on a local disk.

    Args:
        root: the checkpoint root.
        step: the step.
        download_to: for a ``gs://`` root, the local directory to download into (default: a
            new temporary directory, left for the caller).

    Raises:
        CheckpointCorruptError: the step is torn or does not verify.
        CheckpointFormatError: the step is in a newer format than this version reads.
    """
    root = _root(root)
    local_root = fs.to_local_path(root)
    if local_root is not None:
        manifest = checkpoints.verify(root, step, check_hashes=True)
        return CommittedDirectory(step, os.path.join(local_root, f"step-{step}"), manifest, root)
    manifest = checkpoints.read_manifest(root, step)
    target = (
        expand_home(os.fspath(download_to), "download_to")
        if download_to
        else tempfile.mkdtemp(prefix="kfp-spot-restore-")
    )
    local = _download(root, step, manifest, target)
    return CommittedDirectory(
        step, os.path.join(target, "checkpoints", f"step-{step}"), local, root
    )


def latest_directory(root: str, *, download_to: str | None = None) -> CommittedDirectory | None:
    """The newest committed step under ``root`` that verifies, on a local disk; None if none.

    Torn or corrupted steps are skipped with a warning that names them and why; a step in a
    newer format raises :class:`~kfp_spot.checkpoints.CheckpointFormatError` (an older step is no
    substitute for it).

    Args:
        root: the checkpoint root (local path, ``file://`` or ``gs://``).
        download_to: for a ``gs://`` root, where to download the step (default: a new
            temporary directory).
    """
    root = _root(root)
    for step in reversed(checkpoints.list_steps(root)):
        try:
            return committed_directory(root, step, download_to=download_to)
        except CheckpointCorruptError as exc:
            log.warning("skipping checkpoint: %s", exc)
    return None
