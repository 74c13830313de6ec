"""kfp_spot.pipelines.local_tasks stands in for kfp.local's ``run_local_subprocess`` during a
local run: it must keep taking what kfp.local passes, and kfp.local must still look it up by
name at each task (else the stand-in is never called and an interrupted run leaves its task)."""

from __future__ import annotations

import inspect
import re

from kfp.local import subprocess_task_handler

from kfp_spot.pipelines import local_tasks


def test_the_stand_in_takes_what_kfp_local_passes():
    ours = inspect.signature(local_tasks._run_local_subprocess)
    theirs = inspect.signature(subprocess_task_handler.run_local_subprocess)
    assert list(ours.parameters) == list(theirs.parameters)


def test_kfp_local_calls_it_through_its_module_at_each_task():
    source = inspect.getsource(subprocess_task_handler)
    calls = re.findall(r"(?<![.\w])run_local_subprocess\(", source)
    assert len(calls) >= 2  # its definition and the task's call, by the module-global name


def test_the_stand_in_is_in_place_only_while_a_run_is_active():
    original = subprocess_task_handler.run_local_subprocess
    with local_tasks.tasks_end_with_the_run():
        with local_tasks.tasks_end_with_the_run():
            assert subprocess_task_handler.run_local_subprocess is local_tasks._run_local_subprocess
        assert subprocess_task_handler.run_local_subprocess is local_tasks._run_local_subprocess
    assert subprocess_task_handler.run_local_subprocess is original
