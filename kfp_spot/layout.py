"""What a checkpoint directory holds: kfp-spot steps, a trainer's own files, or nothing.

A trainer that does not use :mod:`kfp_spot.trainer` (its own pickles, ``checkpoint.json``, a
framework's folders) still writes under ``$AIP_CHECKPOINT_DIR``; the launcher and the evaluator
use :func:`inspect_layout` to say so plainly instead of "no checkpoint". No kfp import: the
launcher and the evaluator share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kfp_spot import checkpoints, fs
from kfp_spot.checkpoints.paths import list_names

KFP_SPOT = "kfp-spot"
"""``<root>/step-<n>/`` directories with manifests (written by kfp_spot.trainer)."""
FOREIGN = "foreign"
"""Files or folders, but no ``step-<n>`` directory: a trainer's own layout."""
EMPTY = "empty"
"""Nothing there (or the directory does not exist)."""

EXPECTED = f"step-<n>/{checkpoints.MANIFEST_NAME} directories (the layout kfp_spot.trainer writes)"
_SHOWN = 5


@dataclass(frozen=True)
class CheckpointLayout:
    """What :func:`inspect_layout` found.

    Attributes:
        root: the directory looked at.
        kind: :data:`KFP_SPOT`, :data:`FOREIGN` or :data:`EMPTY`.
        names: the entries found (sorted; attempt records left out).
        steps: the ``step-<n>`` directories found (committed or not).
    """

    root: str
    kind: str
    names: tuple[str, ...] = ()
    steps: tuple[int, ...] = field(default_factory=tuple)

    def found(self) -> str:
        """A few of the names, for messages: ``a.json, b.pkl, c.pkl and 16 more``."""
        if not self.names:
            return "nothing: the directory is empty or does not exist"
        shown = ", ".join(self.names[:_SHOWN])
        more = len(self.names) - _SHOWN
        return f"{shown} and {more} more" if more > 0 else shown


_RUN_ROOTS = (("job", "checkpoints"), ("checkpoints",))
"""Where a checkpoint root sits under a directory one may give instead of it: a ``kfp-spot run``
directory (``<run>/job/checkpoints``) or a job's ``base_output_directory``
(``<base>/checkpoints``)."""


def misplaced_root(root: str, names: tuple[str, ...] = (), step_input: str = "") -> str:
    """Where the checkpoint root is when ``root`` is a directory near it, else ``""``.

    ``root`` given as one step's own directory (``.../step-40``, which holds the step's manifest)
    or as the directory above the root (a ``kfp-spot run`` directory, a job's base output
    directory) holds no ``step-<n>`` directory itself: said plainly, rather than as a foreign
    layout or an empty checkpoint.

    Args:
        root: the directory given as a checkpoint root (local or ``gs://``).
        names: its entries, when known (listed otherwise).
        step_input: the input that picks a step, when the reader has one (``step``).
    """
    names = names or tuple(list_names(root))
    if checkpoints.MANIFEST_NAME in names:
        try:
            parent, step = checkpoints.parse_step_dir(root)
        except ValueError:
            return ""
        pick = f" with {step_input}={step}" if step_input else f" (step {step} is there)"
        return (
            f"{root} is itself the directory of step {step}, not a checkpoint root: give the "
            f"directory above it, {parent}{pick}"
        )
    for parts in _RUN_ROOTS:
        if parts[0] not in names:
            continue
        inner = fs.join(root.rstrip("/"), *parts)
        if checkpoints.list_steps(inner):
            return f"{root} holds its checkpoints in {inner}: give that directory"
    return ""


def inspect_layout(root: str) -> CheckpointLayout:
    """Look at the top level of ``root`` (local or ``gs://``) and classify it."""
    root = root.rstrip("/")
    filesystem, path = fs.filesystem(root)
    filesystem.invalidate_cache(path)
    try:
        entries = filesystem.ls(path, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    names = sorted(
        name
        for name in (e.rstrip("/").rsplit("/", 1)[-1] for e in entries)
        if name and name != checkpoints.ATTEMPTS_DIR
    )
    steps = tuple(checkpoints.list_steps(root)) if names else ()
    if steps:
        return CheckpointLayout(root, KFP_SPOT, tuple(names), steps)
    return CheckpointLayout(root, FOREIGN if names else EMPTY, tuple(names))
