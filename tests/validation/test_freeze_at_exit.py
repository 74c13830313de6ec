"""freeze_at_exit: at exit, before the interpreter's teardown, every object is frozen (once)."""

import subprocess
import sys

# Counted from the start: Python 3.12 begins with objects of its own in the permanent generation.
PROBE = """
import atexit, gc
start = gc.get_freeze_count()
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > start))  # runs last
from kfp_spot.validation.inputs import freeze_at_exit
hooks = atexit._ncallbacks()  # CPython's count of registered hooks
freeze_at_exit()
freeze_at_exit()
print("frozen before exit:", gc.get_freeze_count() > start)
print("hooks added:", atexit._ncallbacks() - hooks)
"""


def test_objects_are_frozen_at_exit_not_before_and_the_hook_is_registered_once():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines() == [
        "frozen before exit: False",
        "hooks added: 1",
        "frozen at exit: True",
    ]
