"""Copying checkpoint steps: resume from a previous run, and carry a launch across regions.

``seed_checkpoint`` seeds a new checkpoint directory with another run's latest step;
``copy_step`` (one committed step, verified after the copy) and ``copy_tree`` (a model directory)
are what the launcher uses to move a launch's newest step between regions' buckets.

Training code that resumes from ``AIP_CHECKPOINT_DIR`` (as the trainer helper does) then picks the
run up where it stopped, with no change; code that wants to know also finds the source step in the
``KFP_SPOT_RESUME_FROM`` environment variable.

On Vertex AI the trainer finds its steps by listing the ``/gcs`` mount (Cloud Storage FUSE), which
shows a directory either from an object named ``DIR/`` or, with ``--implicit-dirs`` only, from the
names of the objects under it; Vertex AI does not document which. The seeding writes through gcsfs,
which makes no such objects, so on a ``gs://`` target it writes the directory placeholders
(:func:`kfp_spot.vertex.directory_placeholders`: every directory from the bucket down to the
step's files) before the manifest commits the step: the step is seen by either kind of mount, and
never committed in a directory the trainer cannot list.
"""

from __future__ import annotations

import logging

from kfp_spot import checkpoints, fs
from kfp_spot.layout import misplaced_root
from kfp_spot.vertex.storage import directory_placeholders

log = logging.getLogger(__name__)
_CHUNK = 8 << 20


def _copy_file(source: str, target: str) -> int:
    """Copy one file (across filesystems too); returns its size in bytes."""
    src_fs, src_path = fs.filesystem(source)
    dst_fs, dst_path = fs.filesystem(target)
    dst_fs.makedirs(dst_path.rsplit("/", 1)[0], exist_ok=True)
    if src_fs is dst_fs or type(src_fs) is type(dst_fs):
        src_fs.copy(src_path, dst_path)
        return int(src_fs.size(src_path))
    copied = 0
    with src_fs.open(src_path, "rb") as reader, dst_fs.open(dst_path, "wb") as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)
            copied += len(chunk)
    return copied


def copy_step(
    source_root: str, manifest: checkpoints.Manifest, target_root: str
) -> tuple[checkpoints.Manifest, int]:
    """Copy the committed step ``manifest`` of ``source_root`` into ``target_root``.

    Files first, then (on ``gs://``) the directory placeholders, then the manifest, which commits
    the step; the copy is verified (every file's checksum) before it counts.

    Returns:
        The copy's manifest and the bytes copied (the step's files and its manifest).

    Raises:
        checkpoints.CheckpointError: when the copy does not verify.
    """
    source_step = checkpoints.step_dir(source_root, manifest.step)
    target_step = checkpoints.step_dir(target_root, manifest.step)
    names = list(checkpoints.files_of(manifest))
    copied = sum(
        _copy_file(fs.join(source_step, name), fs.join(target_step, name)) for name in names
    )
    # The manifest's own directory too, before the manifest commits the step.
    write_directory_placeholders(
        [*(fs.join(target_step, n) for n in names), fs.join(target_step, checkpoints.MANIFEST_NAME)]
    )
    checkpoints.commit_manifest(target_root, manifest)
    copied += len(manifest.to_bytes())
    return checkpoints.verify(target_root, manifest.step, check_hashes=True), copied


def copy_tree(source_dir: str, target_dir: str) -> int:
    """Copy every file under ``source_dir`` to the same place under ``target_dir``; the bytes.

    Nothing is copied (0) when ``source_dir`` does not exist.
    """
    src_fs, src_path = fs.filesystem(source_dir)
    if not src_fs.exists(src_path):
        return 0
    copied = 0
    for path in sorted(src_fs.find(src_path)):
        relative = path[len(src_path.rstrip("/")) + 1 :]
        if relative and not relative.endswith("/"):
            copied += _copy_file(fs.join(source_dir, relative), fs.join(target_dir, relative))
    return copied


def write_directory_placeholders(file_uris: list[str]) -> list[str]:
    """Write the empty ``DIR/`` objects a ``/gcs`` mount without implicit directories needs.

    Returns:
        The placeholders written (``gs://BUCKET/DIR/``; none for local files).
    """
    placeholders = directory_placeholders(file_uris)
    for uri in placeholders:
        filesystem, path = fs.filesystem(uri.rstrip("/"))
        filesystem.pipe_file(path + "/", b"")
    return placeholders


def seed_checkpoint(source_root: str, target_root: str) -> checkpoints.Manifest:
    """Copy the newest verified step of ``source_root`` into ``target_root``, manifest last.

    Nothing is copied when ``target_root`` already has a committed step (a restarted launcher,
    or a run that has made progress of its own).

    Args:
        source_root: the previous run's checkpoint directory (a checkpoint artifact's URI).
        target_root: this run's checkpoint directory.

    Returns:
        The manifest of the step the run resumes from.

    Raises:
        checkpoints.CheckpointError: when ``source_root`` does not exist or holds no step that
            verifies (training would silently start from scratch); a
            :class:`~kfp_spot.checkpoints.CheckpointFormatError` when its newest step is in a
            newer format than this kfp-spot reads (an older step is no substitute for it).
    """
    own = checkpoints.latest(target_root, check_hashes=False)
    if own is not None:
        log.info("%s already has step %d; not seeding from %s", target_root, own.step, source_root)
        return own
    valid = "a checkpoint artifact of an earlier run, holding at least one committed step-<n>"
    filesystem, path = fs.filesystem(source_root)
    if not filesystem.exists(path):
        raise checkpoints.CheckpointError(f"{source_root!r} does not exist; expected {valid}")
    manifest = checkpoints.latest(source_root, check_hashes=True)
    if manifest is None:
        has_steps = bool(checkpoints.list_steps(source_root))
        misplaced = "" if has_steps else misplaced_root(source_root)
        if misplaced:  # a step's own directory, or a run's: say where the steps are
            raise checkpoints.CheckpointError(f"{misplaced}; expected {valid}")
        why = (
            "has step directories but none verifies (all torn or corrupt)"
            if has_steps
            else "holds no committed step (the run it came from never checkpointed)"
        )
        raise checkpoints.CheckpointError(f"{source_root!r} {why}; expected {valid}")
    seeded, copied = copy_step(source_root, manifest, target_root)
    log.info(
        "seeded %s with step %d of %s (%d bytes)", target_root, manifest.step, source_root, copied
    )
    return seeded
