"""A trainer saving through a CheckpointManager it never starts is warned of before it runs.

``ckpt = CheckpointManager(...)`` then ``ckpt.maybe_save(...)`` saves, and resumes locally; only
``with`` (or ``start()``) handles the preemption notice and writes the attempt records, so on
Vertex AI a notice ended the job without its last save.
"""

from pathlib import Path

import pytest

from kfp_spot.packaging import prepare_package, unstarted
from kfp_spot.packaging.jobsource import JobSource
from tests.packaging.tiny import write_project

HEAD = "from kfp_spot.trainer import CheckpointManager\n\n"
LOOP = "for step in range(1, 4):\n    {name}.maybe_save(step, {{'w': step}})\n"


def _warnings(tmp_path: Path, task: str) -> list[str]:
    project = write_project(tmp_path / "p", task=HEAD + task)
    source = JobSource(project)
    assert source.reached("tinytrainer.task")  # parsed: no case passes unread
    return unstarted.warnings_for(source, ["tinytrainer.task"])


@pytest.mark.parametrize(
    ("task", "name", "line"),
    [
        ("ckpt = CheckpointManager('/c')\n" + LOOP.format(name="ckpt"), "ckpt", 3),
        (
            "class Loop:\n    def __init__(self):\n        self.ckpt = CheckpointManager()\n\n"
            "    def step(self, i):\n        self.ckpt.save(i, {'w': i})\n",
            "self.ckpt",
            5,
        ),
    ],
)
def test_a_manager_saved_through_and_never_started_is_named(tmp_path, task, name, line):
    (warning,) = _warnings(tmp_path, task)
    assert warning.startswith(
        f"tinytrainer/task.py, line {line}: {name} = CheckpointManager(...) saves but is never "
        "started: on Vertex AI a preemption notice then ends the job without its last save"
    )
    assert warning.endswith(
        "Use `with CheckpointManager(...) as ckpt:` around the training loop (or call its "
        "start() first and close() at the end)"
    )


@pytest.mark.parametrize(
    "task",
    [
        "with CheckpointManager('/c') as ckpt:\n    "
        + LOOP.format(name="ckpt").replace("\n    ", "\n        "),
        "ckpt = CheckpointManager('/c')\nwith ckpt:\n    ckpt.save(1, {})\n",
        "ckpt = CheckpointManager('/c')\nckpt.start()\n" + LOOP.format(name="ckpt"),
        "ckpt = CheckpointManager('/c').start()\n" + LOOP.format(name="ckpt"),
        # handed on: an integration's callback (or the job's own function) starts it
        "ckpt = CheckpointManager('/c')\ncallback = Callback(manager=ckpt)\nckpt.save(1, {})\n",
        "def make():\n    ckpt = CheckpointManager('/c')\n    ckpt.save(0, {})\n    return ckpt\n",
        "ckpt = CheckpointManager('/c')\nrestored = ckpt.restore()\n",  # saves nothing
    ],
)
def test_a_manager_started_handed_on_or_never_saved_through_is_left_alone(tmp_path, task):
    assert _warnings(tmp_path, task) == []


def test_code_without_kfp_spot_is_not_read_for_it(tmp_path: Path):
    # another library's CheckpointManager (orbax's) is that library's
    project = write_project(
        tmp_path / "p",
        task="from orbax.checkpoint import CheckpointManager\n" + "m = "
        "CheckpointManager('/c')\nm.save(1, {})\n",
    )
    assert unstarted.warnings_for(JobSource(project), ["tinytrainer.task"]) == []


def test_prepare_package_warns_of_it(tmp_path, capsys):
    project = write_project(
        tmp_path / "src", task=HEAD + "ckpt = CheckpointManager()\n" + LOOP.format(name="ckpt")
    )
    prepare_package(str(project), str(tmp_path / "stage"), python_module="tinytrainer.task")
    assert (
        "kfp-spot: warning: tinytrainer/task.py, line 3: ckpt = CheckpointManager(...) saves but "
        "is never started" in capsys.readouterr().err
    )
