"""The trainer's attempt records and checkpoint commits, read for the accounting.

The record's format is :class:`kfp_spot.checkpoints.AttemptRecord` (one definition, owned by the
checkpoint layout); this module only decides that a report never fails a launch over them.
"""

from __future__ import annotations

import logging

from kfp_spot import checkpoints
from kfp_spot.checkpoints import AttemptRecord, storage_errors

log = logging.getLogger(__name__)


def read_records(checkpoint_root: str) -> list[AttemptRecord]:
    """The trainer's attempt records under ``<checkpoint_root>/_attempts``, by start time.

    [] when there are none or the storage cannot be read (logged): a report is never worth
    failing a launch over.
    """
    if not checkpoint_root:
        return []
    try:
        return checkpoints.read_attempt_records(checkpoint_root)
    except storage_errors(ValueError) as exc:
        log.info("cannot read attempt records under %s: %s", checkpoint_root, exc)
        return []


def read_commits(checkpoint_root: str) -> list[float]:
    """Wall times of the checkpoint commits under ``checkpoint_root`` ([] when none, or unread)."""
    if not checkpoint_root:
        return []
    try:
        return checkpoints.commit_times(checkpoint_root)
    except storage_errors(ValueError) as exc:
        log.info("cannot list checkpoints under %s: %s", checkpoint_root, exc)
        return []
