"""Resume from a previous run: seed a new checkpoint directory with another run's latest step.

Training code that resumes from ``AIP_CHECKPOINT_DIR`` (as the trainer helper does) then picks the
run up where it stopped, with no change; code that wants to know also finds the source step in the
``KFP_SPOT_RESUME_FROM`` environment variable.
"""

from __future__ import annotations

import logging

from kfp_spot import checkpoints, fs

log = logging.getLogger(__name__)
_CHUNK = 8 << 20


def _copy_file(source: str, target: str) -> None:
    src_fs, src_path = fs.filesystem(source)
    dst_fs, dst_path = fs.filesystem(target)
    dst_fs.makedirs(dst_path.rsplit("/", 1)[0], exist_ok=True)
    if src_fs is dst_fs or type(src_fs) is type(dst_fs):
        src_fs.copy(src_path, dst_path)
        return
    with src_fs.open(src_path, "rb") as reader, dst_fs.open(dst_path, "wb") as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)


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
            verifies (training would silently start from scratch).
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
        why = (
            "has step directories but none verifies (all torn or corrupt)"
            if checkpoints.list_steps(source_root)
            else "holds no committed step (the run it came from never checkpointed)"
        )
        raise checkpoints.CheckpointError(f"{source_root!r} {why}; expected {valid}")
    source_step = checkpoints.step_dir(source_root, manifest.step)
    target_step = checkpoints.step_dir(target_root, manifest.step)
    for name in checkpoints.files_of(manifest):
        _copy_file(fs.join(source_step, name), fs.join(target_step, name))
    checkpoints.commit_manifest(target_root, manifest)
    log.info("seeded %s with step %d of %s", target_root, manifest.step, source_root)
    return checkpoints.verify(target_root, manifest.step, check_hashes=False)
