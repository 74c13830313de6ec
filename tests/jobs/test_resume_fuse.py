"""A resumed job finds its seeded step through ``/gcs`` whether or not the mount infers directories.

Cloud Storage FUSE shows a directory from an object named ``DIR/`` or, with ``--implicit-dirs``
only, from the names of the objects under it. The views below are built from the objects really in
the (emulated) bucket, with exactly those two rules, and the trainer's own step discovery
(``kfp_spot.trainer.restore.newest_verified`` on the path ``fs.mounted_path`` maps to) runs on them.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from kfp_spot import checkpoints, fs
from kfp_spot.jobs.resume import seed_checkpoint
from kfp_spot.layout import KFP_SPOT, inspect_layout
from kfp_spot.trainer.restore import newest_verified
from kfp_spot.vertex import directory_placeholders
from tests.conftest import TEST_BUCKET


def test_placeholders_are_every_directory_from_the_bucket_down():
    assert directory_placeholders(
        [
            "gs://b1/run/ckpt/step-5/a.bin",
            "gs://b1/run/ckpt/step-5/sub/c.bin",
            "gs://b1/run/ckpt/step-5/manifest.json",
            "/local/ckpt/step-5/a.bin",  # a local file needs none
            "gs://b1/top.bin",
        ]
    ) == [
        "gs://b1/run/",
        "gs://b1/run/ckpt/",
        "gs://b1/run/ckpt/step-5/",
        "gs://b1/run/ckpt/step-5/sub/",
    ]


def _objects(prefix: str) -> dict[str, bytes]:
    from google.cloud import storage

    client = storage.Client(project="kfp-spot-test")
    return {  # a placeholder is empty (and the emulator serves no download of a name ending '/')
        blob.name: b"" if blob.name.endswith("/") else blob.download_as_bytes()
        for blob in client.list_blobs(TEST_BUCKET, prefix=prefix)
    }


def mount_view(objects: dict[str, bytes], mount_root: Path, *, implicit_dirs: bool) -> None:
    """What ``/gcs`` shows of ``objects`` as Cloud Storage FUSE would, written under ``mount_root``.

    A directory is shown when an object ``DIR/`` exists (with ``implicit_dirs``, also when any
    object's name starts with ``DIR/``), and only under a directory that is shown; a file only in a
    shown directory.
    """
    explicit = {name.rstrip("/") for name in objects if name.endswith("/")}
    implied = {
        "/".join(name.split("/")[:depth])
        for name in objects
        for depth in range(1, name.rstrip("/").count("/") + 1)
    }
    known = explicit | implied if implicit_dirs else explicit

    def shown(directory: str) -> bool:
        parts = directory.split("/") if directory else []
        return all("/".join(parts[:depth]) in known for depth in range(1, len(parts) + 1))

    bucket = mount_root / TEST_BUCKET
    bucket.mkdir(parents=True)
    for directory in sorted(known):
        if shown(directory):
            (bucket / directory).mkdir(parents=True, exist_ok=True)
    for name, data in objects.items():
        if not name.endswith("/") and shown(os.path.dirname(name)):
            (bucket / name).write_bytes(data)


@pytest.mark.parametrize("implicit_dirs", [True, False])
def test_a_seeded_step_is_found_through_the_mount(gcs_emulator, tmp_path, implicit_dirs):
    run = f"resume-{uuid.uuid4().hex}"
    previous = f"gs://{TEST_BUCKET}/{run}/previous/checkpoints"
    ours = f"gs://{TEST_BUCKET}/{run}/job/checkpoints"
    checkpoints.write_step(previous, 12, {"weights.bin": b"\x01" * 1024})  # by gcsfs: no DIR/
    assert seed_checkpoint(previous, ours).step == 12
    # What the launcher sees through gcsfs is unchanged by the placeholders.
    assert checkpoints.latest(ours).step == 12
    assert inspect_layout(ours).kind == KFP_SPOT

    mount_root = tmp_path / "gcs"
    mount_view(_objects(f"{run}/"), mount_root, implicit_dirs=implicit_dirs)
    resumed = newest_verified(fs.mounted_path(ours, str(mount_root)), allow_pickle=False)
    assert resumed is not None and resumed.step == 12
    assert resumed.state["weights.bin"] == b"\x01" * 1024
    # The view is honest: the source, written with no placeholders, is what a mount without
    # implicit directories cannot list (a job resuming from it this way starts at step 0).
    source = newest_verified(fs.mounted_path(previous, str(mount_root)), allow_pickle=False)
    assert (source is not None) is implicit_dirs
