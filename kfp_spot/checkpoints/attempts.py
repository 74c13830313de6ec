"""Attempt records: one JSON file per training attempt under ``<root>/_attempts/``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kfp_spot import fs
from kfp_spot.checkpoints.manifest import MAX_MANIFEST_BYTES
from kfp_spot.checkpoints.paths import list_names
from kfp_spot.checkpoints.verify import committed_steps

log = logging.getLogger("kfp_spot.checkpoints")

ATTEMPTS_DIR = "_attempts"


def read_attempt_records(root: str) -> list[dict[str, Any]]:
    """Every attempt record under ``<root>/_attempts`` (ordered by start time)."""
    directory = fs.join(root, ATTEMPTS_DIR)
    records = []
    for name in list_names(directory):
        if not name.endswith(".json") or name.startswith("."):
            continue
        uri = fs.join(directory, name)
        try:
            local = fs.to_local_path(uri)
            if local is not None:
                with open(local, "rb") as handle:
                    data = handle.read(MAX_MANIFEST_BYTES)
            else:
                filesystem, path = fs.filesystem(uri)
                with filesystem.open(path, "rb") as handle:
                    data = handle.read(MAX_MANIFEST_BYTES)
            record = json.loads(data)
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("skipping unreadable attempt record %s: %s", name, exc)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            log.warning("skipping attempt record %s: not a JSON object", name)
    return sorted(records, key=_attempt_order)


def _attempt_order(record: Mapping[str, Any]) -> tuple[int, float, str]:
    # Numeric start times first, in order; a record with a missing or non-numeric one (written by
    # another version, or hand-edited) must not make the whole listing fail to sort.
    start = record.get("start_time")
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        return (0, float(start), "")
    return (1, 0.0, str(start))


def write_attempt_record(root: str, attempt_id: str, record: Mapping[str, Any]) -> None:
    """Write (or overwrite) the attempt record ``attempt_id`` under ``<root>/_attempts``.

    Readers see the old record or the new one, never a mix: a local file is replaced by rename,
    an object by a single PUT.
    """
    if not attempt_id or "/" in attempt_id:
        raise ValueError(f"invalid attempt id {attempt_id!r}: a non-empty name without '/'")
    data = json.dumps(dict(record), sort_keys=True).encode()
    fs.atomic_write(fs.join(root, ATTEMPTS_DIR, f"{attempt_id}.json"), data)


def commit_times(root: str) -> list[float]:
    """Wall times at which checkpoints under ``root`` were committed, ascending.

    The committed manifests give theirs; attempt records add each attempt's ``last_commit_time``,
    which survives retention deleting that step. Used to tell kept work from lost work.
    """
    times = {m.wall_time for m in committed_steps(root)}
    for record in read_attempt_records(root):
        value = record.get("last_commit_time")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            times.add(float(value))
    return sorted(times)
