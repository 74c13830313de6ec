"""A trainer reading AIP_MODEL_DIR raw is warned of before it runs.

Locally the emulator sets the variable to a directory of this machine, so ``np.save`` into it
works; on Vertex AI it is a ``gs://`` URI, and the same code writes into a local ``gs:`` folder
lost with the VM: promote-model then finds no model after the whole training.
"""

from pathlib import Path

from kfp_spot.packaging import outputdirs, prepare_package
from tests.local_prechecks import warnings_before_the_run
from tests.packaging.tiny import write_project

RAW = """\
import os

import numpy as np


def main():
    model_dir = os.environ["AIP_MODEL_DIR"]
    os.makedirs(model_dir, exist_ok=True)
    np.save(os.path.join(model_dir, "w.npy"), np.zeros(3))


if __name__ == "__main__":
    main()
"""


def test_prepare_package_warns_of_a_raw_model_dir_read(tmp_path, capsys):
    project = write_project(tmp_path / "src", task=RAW)
    prepare_package(str(project), str(tmp_path / "stage"), python_module="tinytrainer.task")
    err = capsys.readouterr().err
    assert (
        "kfp-spot: warning: tinytrainer/task.py, line 7 reads AIP_MODEL_DIR by name: on Vertex AI "
        "it is a gs:// URI" in err
    )
    assert "kfp_spot.trainer.output_dirs() or resolve_output_dirs()" in err


def test_code_that_handles_gs_uris_itself_or_reads_no_dir_is_left_alone(tmp_path: Path):
    quiet = write_project(tmp_path / "quiet")  # reads no output directory
    assert outputdirs.warnings_for(quiet, "tinytrainer.task") == []
    gcs = write_project(tmp_path / "gcs", task="import gcsfs\n" + RAW)
    assert outputdirs.warnings_for(gcs, "tinytrainer.task") == []


def test_the_job_module_is_found_as_the_package_would_name_it(tmp_path: Path):
    project = write_project(tmp_path / "p", task=RAW)
    assert outputdirs.job_module(project) == "tinytrainer.task"  # its one task.py
    assert outputdirs.job_module(project, "tinytrainer.other") == "tinytrainer.other"
    with (project / "pyproject.toml").open("a") as pyproject:
        pyproject.write('\n[tool.kfp-spot]\npython-module = "tinytrainer.evaluate"\n')
    assert outputdirs.job_module(project) == "tinytrainer.evaluate"
    (warning,) = outputdirs.warnings_for(project, "tinytrainer.task")
    assert warning.startswith("tinytrainer/task.py, line 7 reads AIP_MODEL_DIR by name")


def test_a_local_run_of_a_script_warns_before_it_starts(tmp_path: Path):
    # The warning was only in prepare-package's log for a script source: the run said nothing,
    # and np.save(os.environ["AIP_MODEL_DIR"] + ...) worked here and wrote to 'gs:' on the VM.
    script = tmp_path / "code" / "fit model.py"
    script.parent.mkdir()
    script.write_text(RAW)
    parameters = {"python_module": "fit.task", "evaluation_entry_point": "fit.task:ev"}
    shown = warnings_before_the_run(tmp_path, script, parameters)
    assert len(shown) == 1, shown
    assert shown[0].startswith("warning: fit model.py, line 7 reads AIP_MODEL_DIR by name")
