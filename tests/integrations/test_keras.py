"""Keras 3 (JAX backend, CPU), for real: preempted at random points, the same final weights."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from kfp_spot import checkpoints
from tests.integrations.examples_lib import (
    KERAS_ARGS,
    RANDOM_KINDS,
    Preempted,
    keras_home_of,
    newest,
    preempt_three_ways,
    sha256,
)

# Keras and JAX take seconds of CPU to import: the module imports neither (every xdist worker
# collects every module), only the tests that call Keras here do, through the ``keras`` fixture.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None,
    reason="Keras with its JAX backend is not installed",
)

ARGS = KERAS_ARGS  # the never-preempted run's (tests/integrations/conftest.py)
STEPS_PER_EPOCH = 22  # 1348 training rows in batches of 64
TOTAL = 3 * STEPS_PER_EPOCH


@pytest.fixture(scope="module")
def keras():
    """Keras in this process. Module-scoped, so the tests using it share one worker
    (tests/conftest.py groups them): Keras is imported by one worker, not by all."""
    return pytest.importorskip("keras")


@pytest.fixture
def uninterrupted(keras_uninterrupted: Path) -> Path:
    """The never-preempted run the tests compare with (read only; tests/integrations/conftest.py:
    one per run, every worker's)."""
    return keras_uninterrupted


# A Keras attempt is ~4 CPU-s, most of it importing Keras: the two tests below assert their parts
# of one run of four attempts (a notice and a torn save at set steps, then SIGKILL at a step chosen
# at random), not of two runs of three each. Every kind of preemption is seen.
SEED = 18


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> Preempted:
    """Noticed mid-epoch at step 27, killed while saving step 40, killed at a random step, then
    run to the end (step 27's position.json read as it happens)."""
    base = tmp_path_factory.mktemp("preempted")
    return preempt_three_ways(
        "keras",
        base,
        ARGS,
        notice=27,
        torn=40,
        record="position.json",
        total=TOTAL,
        every=10,
        seed=SEED,
    )


@pytest.mark.slow
def test_preempted_at_random_points_ends_with_bitwise_the_same_weights(uninterrupted, preempted):
    root, kinds = preempted.root, RANDOM_KINDS
    # preempt_randomly checked that each term@step attempt saved its step on the notice
    assert [e[1] for e in preempted.events].count(143) == kinds.count("term@step")
    assert newest(root) == TOTAL == newest(uninterrupted / "ckpt")
    final, clean = root / f"step-{TOTAL}", uninterrupted / "ckpt" / f"step-{TOTAL}"
    assert sha256(final / "model.weights.h5") == sha256(clean / "model.weights.h5")
    assert sha256(final / "keras_state.npz") == sha256(clean / "keras_state.npz")
    records = checkpoints.read_attempt_records(str(root))
    assert [r.exit_reason for r in records].count("preempted") >= 1 + kinds.count("term@step")
    assert len(records) == 2 + len(kinds) + 1  # the two set preemptions, the random, the final


def test_a_mid_epoch_notice_and_a_torn_save_resume_mid_epoch_exactly(
    keras, uninterrupted, preempted
):
    root, model = preempted.root, preempted.model
    run = preempted.noticed
    assert run.returncode == 143, run.output[-3000:]
    assert preempted.at_notice == {"epoch": 1, "batch": 5, "step": 27}
    # Resumed, it is killed in the middle of saving step 40: that step is torn, 30 is the newest.
    torn = preempted.torn
    assert torn.returncode == -9, torn.output[-3000:]
    assert "resuming fit from step 27: epoch 1, after batch 5" in torn.output
    assert preempted.newest_after_torn == 30
    # The next attempt (killed later at a random step) resumed from step 30, mid-epoch.
    resumed, final = preempted.runs[0], preempted.runs[-1]
    assert final.returncode == 0, final.output[-3000:]
    assert "resuming fit from step 30: epoch 1, after batch 8" in resumed.output
    assert sha256(root / f"step-{TOTAL}" / "model.weights.h5") == sha256(
        uninterrupted / "ckpt" / f"step-{TOTAL}" / "model.weights.h5"
    )
    assert sha256(root / f"step-{TOTAL}" / "keras_state.npz") == sha256(
        uninterrupted / "ckpt" / f"step-{TOTAL}" / "keras_state.npz"
    )
    records = checkpoints.read_attempt_records(str(root))
    assert len(records) == 4 and records[0].exit_reason == "preempted"
    clean_model = keras.saving.load_model(uninterrupted / "model" / "model.keras")
    model_after = keras.saving.load_model(model / "model.keras")
    for a, b in zip(clean_model.get_weights(), model_after.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_keep_last_and_the_files_are_keras_own_format(keras, uninterrupted):
    root = uninterrupted / "ckpt"
    assert checkpoints.list_steps(str(root)) == [50, 60, TOTAL]  # keep_last=3
    manifest = checkpoints.verify(str(root), TOTAL)
    assert sorted(f.path for f in manifest.files) == [
        "epoch_rng.json",
        "keras_state.npz",
        "model.weights.h5",
        "position.json",
    ]
    # Plain Keras reads the step: the trained model and the step's weights file agree.
    trained = keras.saving.load_model(uninterrupted / "model" / "model.keras")
    fresh = keras.models.clone_model(trained)
    fresh.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(root / f"step-{TOTAL}" / "model.weights.h5")
    for a, b in zip(trained.get_weights(), fresh.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("compiled", [True, False])
def test_load_step_for_evaluation_warns_about_nothing(keras, uninterrupted, compiled):
    from kfp_spot.trainer.integrations.keras import load_step

    trained = keras.saving.load_model(uninterrupted / "model" / "model.keras")
    fresh = keras.models.clone_model(trained)  # as evaluate() builds it: new, optimizer unbuilt
    if compiled:
        fresh.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_step(fresh, str(uninterrupted / "ckpt" / f"step-{TOTAL}"))
    assert not [str(w.message) for w in caught if "Skipping" in str(w.message)]
    for a, b in zip(trained.get_weights(), fresh.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"has no model.weights.h5"):
        load_step(fresh, str(uninterrupted))


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None, reason="Keras' default backend is here"
)
def test_without_a_chosen_backend_the_import_says_how_to_choose_one(tmp_path, uninterrupted):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["KERAS_HOME"] = str(tmp_path)  # no keras.json choosing one either
    run = subprocess.run(
        [sys.executable, "-c", "import kfp_spot.trainer.integrations.keras"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: Keras cannot load its backend (No module named 'tensorflow')"
    )
    assert "set KERAS_BACKEND to an installed one (jax)" in last
    assert "During handling" not in run.stderr  # one error, not a chain of them
    # Choosing one as it says is enough: the never-preempted run imported this module with
    # KERAS_BACKEND=jax from a Keras home that held no keras.json (Keras wrote its own there) and
    # exited 0 (its fixture asserts that), so a process of its own here would only repeat that.
    assert (keras_home_of(uninterrupted) / "keras.json").is_file()
