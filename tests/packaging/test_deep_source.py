"""Source that nests deeply: what Python imports is read, what it refuses is one clear error.

A chain like ``1 + 1 + ...`` nests one level per term. Python compiles about two thousand; the
static readers of prepare_package recursed once per level and failed with a bare RecursionError
on such a file (generated code, long concatenations), and on one Python refuses to compile.
"""

from pathlib import Path

import pytest

from kfp_spot.packaging import prepare_package
from kfp_spot.packaging.errors import ModuleSyntaxError
from tests.packaging.tiny import write_project

MODULE = "tinytrainer.task"


def test_code_python_compiles_is_read_wherever_it_nests(tmp_path: Path):
    deep = " + ".join(["1"] * 1900)
    task = f"""import os
X = {deep}
print({deep})
if {deep}:
    pass
with open(os.devnull if {deep} else os.devnull) as f:
    pass
def g():
    return {deep}
Y = os.environ.get("A" + {" + ".join(['""'] * 1500)})
Z = [{deep} for _ in range(1)]
"""
    compile(task, "task.py", "exec")  # Python takes it
    project = write_project(tmp_path / "src", task=task)
    info = prepare_package(str(project), str(tmp_path / "stage"), python_module=MODULE)
    assert Path(info.uri).is_file()


def test_code_too_deep_for_pythons_compiler_is_one_clear_error(tmp_path: Path):
    task = "x = " + " + ".join(["1"] * 20000) + "\n"
    with pytest.raises(RecursionError):
        compile(task, "task.py", "exec")  # Python refuses it as well
    project = write_project(tmp_path / "src", task=task)
    with pytest.raises(
        ModuleSyntaxError,
        match=r"^source: tinytrainer/task.py is nested too deeply for Python's compiler "
        r"\(the built package tiny-trainer 1.2.3 would fail to import it\)$",
    ):
        prepare_package(str(project), str(tmp_path / "stage"), python_module=MODULE)


def test_the_static_readers_take_what_nests_too_deep_to_unparse(tmp_path: Path):
    from kfp_spot.packaging import unstarted
    from kfp_spot.packaging.jobsource import JobSource

    chain = ".".join(["a"] * 1500)  # Python takes it; ast.unparse recurses past the limit
    task = (
        "from kfp_spot.trainer import CheckpointManager\n"
        f"{chain} = CheckpointManager('/c')\n{chain}.save(1, {{}})\n"
    )
    compile(task, "task.py", "exec")
    source = JobSource(write_project(tmp_path / "src", task=task))
    assert source.reached(MODULE)
    assert unstarted.warnings_for(source, [MODULE]) == []  # no manager named ""
