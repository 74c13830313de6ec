"""Every example trainer takes its directories alike: given, from Vertex AI's variables, or a
clear usage error (as is a bad ``--checkpoint-every``); and a ``gs://`` base output directory works
through the ``/gcs`` mount on a VM that has no gcsfs (the light kfp-spot-trainer wheel does not
bring it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfp_spot import checkpoints
from tests.integrations.examples_lib import KERAS_ARGS, XGBOOST_ARGS, run_on_a_vm
from tests.trainer.trainer_testlib import REPO, run_example_module

# (example directory, module, a short run's arguments, the model files it writes)
EXAMPLES = {
    "trainer": ("trainer.task", ["--epochs", "1", "--checkpoint-every", "5"], ["model.npz"]),
    "keras": ("trainer.task", KERAS_ARGS, ["model.keras"]),
    "xgboost": ("trainer.task", XGBOOST_ARGS, ["model.ubj"]),
    "elastic": (
        "elastic_trainer.task",
        ["--steps", "4", "--checkpoint-every", "2", "--data-size", "192"],
        ["model.npz", "history.json"],
    ),
}

# parse_args with no directory at all, then with only the checkpoint directory, then with both
# and a bad --checkpoint-every.
_USAGE_ERRORS = """
import importlib, os, sys
task = importlib.import_module(sys.argv[1])
for env, argv in (
    ({}, []),
    ({"AIP_CHECKPOINT_DIR": "/ck"}, []),
    ({"AIP_MODEL_DIR": "/m"}, ["--checkpoint-every", "often"]),
):
    os.environ.update(env)
    try:
        task.parse_args(argv)
    except SystemExit as exc:
        print("exit status", exc.code, file=sys.stderr)
"""


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_names_a_missing_directory_and_a_bad_interval(name: str) -> None:
    module, _, _ = EXAMPLES[name]
    run = run_example_module(
        REPO / "examples" / name, None, None, [], module=module, wrapper=_USAGE_ERRORS
    )
    assert run.returncode == 0, run.output
    lines = [line for line in run.output.splitlines() if "error:" in line or "exit" in line]
    assert len(lines) == 6, run.output
    assert "error: no checkpoint directory: set AIP_CHECKPOINT_DIR " in lines[0]
    assert lines[0].endswith("or pass --checkpoint-dir")
    assert "error: no model directory: set AIP_MODEL_DIR " in lines[2]
    assert lines[2].endswith("or pass --model-dir")
    assert (
        "error: argument --checkpoint-every: checkpoint interval 'often' is not valid" in lines[4]
    )
    assert lines[1] == lines[3] == lines[5] == "exit status 2"


# Keras and XGBoost run as on a VM once per test run (tests/integrations/conftest.py): those runs
# are the ones test_keras and test_xgboost compare their preempted runs with, so a second process
# of each here would only repeat them (Keras: seconds of CPU to import).
SHARED_RUNS = {"keras": "keras_uninterrupted", "xgboost": "xgboost_uninterrupted"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_gs_base_output_directory_goes_through_the_mount(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    module, args, model_files = EXAMPLES[name]
    if name in SHARED_RUNS:  # the fixture asserted that it exited 0
        job = request.getfixturevalue(SHARED_RUNS[name])
    else:
        run, job = run_on_a_vm(name, tmp_path / "gcs", args, module=module)
        assert run.returncode == 0, run.output[-3000:]
    assert checkpoints.latest(str(job / "ckpt")) is not None
    for file in model_files:
        assert (job / "model" / file).is_file(), file
