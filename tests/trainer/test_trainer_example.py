"""The example trainer end to end: preempted anywhere, it ends with the same weights."""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from trainer_testlib import (
    EXAMPLE,
    TrainerRun,
    load_model,
    run_example_module,
    run_trainer,
    trainer_env,
    two_epoch_run,
)

from kfp_spot import checkpoints
from tests.shared import once_per_run

EPOCHS = 3
PER_BATCH = ["--steps-per-epoch", "43"]  # a step per minibatch: 129 steps, saves mid-epoch
TOTAL = 129
_REFERENCES: dict[int, dict[str, bytes]] = {}


def sweep_args(seed: int, every: str, async_save: bool = False, *, pace: bool = False) -> list[str]:
    """The sweep's command line: EPOCHS epochs of a step per minibatch; ``pace``: 5 ms steps.

    The sweep compares weights (``model.npz``): it leaves out ``model.joblib``, whose export
    (scikit-learn's import, most of a short attempt's CPU) the tests below cover.
    """
    args = ["--epochs", str(EPOCHS), "--checkpoint-every", every, "--seed", str(seed), *PER_BATCH]
    args.append("--no-sklearn-model")
    if async_save:
        args.append("--async-save")
    if pace:
        args += ["--step-seconds", "0.005"]
    return args


def exit_status(failpoint: str) -> int:
    """How an attempt stopped by ``failpoint`` exits: 143 after SIGTERM, -9 when SIGKILLed."""
    return 143 if failpoint.startswith("term") else -signal.SIGKILL


def reference(seed: int, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Final weights of an uninterrupted run with ``seed`` (computed once per seed and run)."""
    if seed not in _REFERENCES:

        def train(base: Path) -> str:
            run = run_trainer(str(base / "ck"), str(base / "model"), sweep_args(seed, "1000"))
            assert run.returncode == 0, run.output
            return str(base / "model")

        model = once_per_run(tmp_path_factory, f"trainer-reference-{seed}", train)
        _REFERENCES[seed] = load_model(model)
    return _REFERENCES[seed]


def test_uninterrupted_run_writes_model_and_evaluates(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # No model.joblib (TWO_EPOCHS): this test is about the checkpoints, model.json and
    # evaluate(); the export with scikit-learn is the tests' of the export below. The run is
    # shared with a test that compares its weights; nothing here writes to it.
    run = two_epoch_run(tmp_path_factory)
    ck, model = run["checkpoints"], Path(run["model"])
    assert "starting from step 0" in run["output"]
    info = json.loads((model / "model.json").read_text())
    assert info["steps"] == 86
    # keep_last 3: the final step and the two saves before it
    assert [m.step for m in checkpoints.committed_steps(ck)] == [60, 80, 86]
    records = checkpoints.read_attempt_records(ck)
    assert [(r.exit_reason, r.first_step, r.last_committed_step) for r in records] == [
        ("finished", 0, 86)
    ]

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "trainer"))
    try:
        from trainer.evaluate import evaluate
    finally:
        sys.path.pop(0)
    metrics = evaluate(f"{ck}/step-86", {})
    assert metrics["step"] == 86.0
    assert metrics["examples"] == 449.0  # the held-out quarter of 1797
    assert metrics["accuracy"] > 0.85
    cm = metrics["confusion_matrix"]
    assert cm["labels"] == list(range(10))
    assert sum(map(sum, cm["matrix"])) == 449
    assert sum(cm["matrix"][i][i] for i in range(10)) == round(metrics["accuracy"] * 449)
    train = evaluate(f"{ck}/step-86", {"split": "train"})
    assert train["examples"] == 1797.0 - 449.0
    with pytest.raises(ValueError, match="split"):
        evaluate(f"{ck}/step-86", {"split": "validation"})
    with pytest.raises(ValueError, match="unknown key"):
        evaluate(f"{ck}/step-86", {"epochs": 3})


def _schedule(rng: random.Random, every: str, kinds: list[str]) -> list[str]:
    """Failpoints of ``kinds`` at random increasing steps where each one is sure to fire.

    A ``save-*`` point needs a step the run saves at: a multiple of K for ``every=K``; for
    ``auto`` only step 1 is certain (the first attempt saves at once to measure a save), so
    ``auto`` schedules put a save-* kind first, at step 1, and use ``step`` points after it.
    """
    out = []
    for i, kind in enumerate(kinds):  # failpoint i falls in the i-th slice of the run
        low, high = max(1, i * TOTAL // len(kinds)), (i + 1) * TOTAL // len(kinds)
        if "save" in kind and every == "auto":
            assert i == 0, "auto: only the first failpoint can hit a save"
            step = 1
        elif "save" in kind:
            k = int(every)
            step = rng.choice(range((low + k - 1) // k * k, high, k))
        else:
            step = rng.randrange(low, high)
        out.append(f"{kind}:{step}")
    return out


SCENARIOS = [
    # (training seed, checkpoint interval, async saves, the preemptions dealt, in order)
    (0, "7", False, ["kill@save-mid", "term@step"]),
    (0, "20", True, ["kill@save-before-manifest", "kill@step"]),
    (1, "auto", False, ["kill@save-mid", "kill@step", "term@step"]),
    (1, "3", True, ["term@save-mid", "kill@save-mid"]),
    (2, "13", False, ["term@save-before-manifest", "kill@step", "kill@save-before-manifest"]),
    (2, "auto", True, ["term@save-before-manifest", "kill@step"]),
    (3, "5", False, ["kill@step", "term@save-mid", "kill@save-mid"]),
    (3, "30", True, ["kill@save-mid", "term@step"]),
]


@pytest.mark.parametrize(("seed", "every", "async_save", "kinds"), SCENARIOS)
def test_preempted_run_ends_bitwise_equal_to_uninterrupted(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    every: str,
    async_save: bool,
    kinds: list[str],
) -> None:
    schedule = _schedule(random.Random(f"{seed}-{every}-{kinds}"), every, kinds)
    ck, model = str(tmp_path / "ck"), str(tmp_path / "model")
    # auto never makes the loop wait for a background write, so a SIGTERM sent from inside that
    # write lands some steps later: pace the steps so the run is still going by then.
    args = sweep_args(seed, every, async_save, pace=async_save and every == "auto")
    runs = []
    for point in schedule:
        run = run_trainer(ck, model, args, failpoints=point)
        runs.append(run)
        assert run.returncode == exit_status(point), (point, run.output)
        if point.startswith("term"):
            assert "preemption notice" in run.output
            # SIGTERM leaves time for one more save: it stopped exactly where it committed.
            stopped = int(re.search(r"preempted after step (\d+)", run.output).group(1))
            assert checkpoints.latest(ck).step == stopped
        latest = checkpoints.latest(ck)
        runs[-1].resume_expected = latest.step if latest else None
    runs.append(run_trainer(ck, model, args))
    assert runs[-1].returncode == 0, runs[-1].output
    for before, after in itertools.pairwise(runs):
        step = before.resume_expected
        if step is None:
            assert "starting from step 0" in after.output
        else:
            assert f"resuming from step {step}\n" in after.output
    assert load_model(model) == reference(seed, tmp_path_factory), schedule
    reasons = [r.exit_reason for r in checkpoints.read_attempt_records(ck)]
    # a SIGTERM'ed attempt closes its record as preempted; a SIGKILLed one cannot close it
    assert reasons == [("preempted" if k.startswith("term") else None) for k in kinds] + [
        "finished"
    ]


def test_sigterm_with_grace_saves_and_resumes_where_it_stopped(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The platform's way: SIGTERM, a grace period, then SIGKILL if still alive."""
    ck, model = str(tmp_path / "ck"), str(tmp_path / "model")
    args = ["--epochs", str(EPOCHS), "--checkpoint-every", "1000", "--step-seconds", "0.01"]
    args += [*PER_BATCH, "--no-sklearn-model"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.task", *args],
        env=trainer_env(ck, model),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until it is past the first epoch (no checkpoint yet)
        lines.append(line)
        if line.startswith("epoch 1/"):
            break
        assert time.monotonic() < deadline, "".join(lines)
    proc.send_signal(signal.SIGTERM)
    try:
        # the trainer's grace period (--grace-period, 30 s): it saves and exits well within it,
        # but a loaded machine may slow that down by seconds
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail("the trainer did not stop within the grace period:\n" + "".join(lines) + out)
    assert proc.returncode == 143, "".join(lines) + out
    stopped = int(re.search(r"preempted after step (\d+)", out).group(1))
    assert stopped >= 43
    assert checkpoints.latest(ck).step == stopped  # the save on the notice committed

    final = run_trainer(ck, model, args)
    assert final.returncode == 0, final.output
    assert f"resuming from step {stopped}" in final.output
    assert load_model(model) == reference(0, tmp_path_factory)
    records = checkpoints.read_attempt_records(ck)
    assert [r.exit_reason for r in records] == ["preempted", "finished"]
    assert records[0].preemption_notice_time is not None
    assert records[1].first_step == stopped


def test_step_granularity_does_not_change_the_weights(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Weights and resumption only: the two runs that finish skip the scikit-learn export.
    args = ["--epochs", str(EPOCHS), "--checkpoint-every", "1", "--steps-per-epoch", "1"]
    args.append("--no-sklearn-model")
    run = run_trainer(str(tmp_path / "ck"), str(tmp_path / "model"), args)
    assert run.returncode == 0, run.output
    assert "training 3 steps" in run.output
    assert load_model(str(tmp_path / "model")) == reference(0, tmp_path_factory)
    bad = run_trainer(str(tmp_path / "ck2"), str(tmp_path / "m2"), ["--steps-per-epoch", "44"])
    assert bad.returncode != 0 and "use 1..43" in bad.output
    changed = run_trainer(str(tmp_path / "ck"), str(tmp_path / "model"), [*args, "--seed", "9"])
    assert changed.returncode != 0 and "seed: 0 -> 9" in changed.output
    shorter = run_trainer(str(tmp_path / "ck"), str(tmp_path / "model"), [*args, "--epochs", "2"])
    assert shorter.returncode != 0 and "pass --epochs >= 3" in shorter.output
    longer = run_trainer(str(tmp_path / "ck"), str(tmp_path / "model"), [*args, "--epochs", "4"])
    assert longer.returncode == 0 and "resuming from step 3" in longer.output  # extended


# Runs the module and says, as its last line, whether scikit-learn was imported.
_REPORT_SKLEARN = (
    "import runpy, sys\n"
    "module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]\n"
    "try:\n"
    "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    print('sklearn imported:', 'sklearn' in sys.modules, flush=True)\n"
)


EXPORT_ARGS = ["--epochs", "2", "--checkpoint-every", "1"]


def _files(model_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in model_dir.iterdir()}


@dataclass
class LeanThenFull:
    """A run with --no-sklearn-model, then the same run asking for the scikit-learn model."""

    base: Path  # its ck/ and model/
    lean: TrainerRun
    lean_files: set[str]  # model/ after the lean run
    full: TrainerRun


@pytest.fixture(scope="module")
def lean_then_full(tmp_path_factory: pytest.TempPathFactory) -> LeanThenFull:
    """The two export tests below share these runs: the second attempt's export (with
    model.joblib) is the one the resumption test starts from, one scikit-learn export fewer than
    each making its own. Nothing may change the directory: a test that goes on copies it.
    """
    base = tmp_path_factory.mktemp("export")
    ck, model = str(base / "ck"), str(base / "model")
    lean = run_example_module(
        EXAMPLE, ck, model, [*EXPORT_ARGS, "--no-sklearn-model"], wrapper=_REPORT_SKLEARN
    )
    lean_files = {p.name for p in (base / "model").iterdir()}
    full = run_example_module(EXAMPLE, ck, model, EXPORT_ARGS, wrapper=_REPORT_SKLEARN)
    return LeanThenFull(base, lean, lean_files, full)


def test_without_the_sklearn_model_the_rest_is_written_and_scikit_learn_never_imported(
    lean_then_full: LeanThenFull,
) -> None:
    lean, full = lean_then_full.lean, lean_then_full.full
    assert lean.returncode == 0, lean.output
    assert lean.output.rstrip().endswith("sklearn imported: False")
    assert lean_then_full.lean_files == {"model.npz", "model.json"}
    # Asked for the scikit-learn model after all: that export is not whole, so it is done.
    assert full.returncode == 0, full.output
    assert "already in" not in full.output
    assert full.output.rstrip().endswith("sklearn imported: True")
    assert {p.name for p in (lean_then_full.base / "model").iterdir()} == {
        "model.npz",
        "model.joblib",
        "model.json",
    }


def test_an_attempt_resuming_after_the_export_exits_without_exporting_again(
    lean_then_full: LeanThenFull, tmp_path: Path
) -> None:
    shared, exporting = lean_then_full.base, lean_then_full.full
    assert exporting.returncode == 0, exporting.output
    assert exporting.output.rstrip().endswith("sklearn imported: True")  # the export needs it
    shutil.copytree(shared, tmp_path, dirs_exist_ok=True)  # the shared run stays as it was
    ck, model = str(tmp_path / "ck"), str(tmp_path / "model")
    files = _files(tmp_path / "model")
    assert set(files) == {"model.npz", "model.joblib", "model.json"}
    # Preempted after the export, the job starts another attempt: it has nothing left to do.
    again = run_example_module(EXAMPLE, ck, model, EXPORT_ARGS, wrapper=_REPORT_SKLEARN)
    assert again.returncode == 0, again.output
    assert "resuming from step 2" in again.output
    assert "the model of step 2 is already in" in again.output
    assert again.output.rstrip().endswith("sklearn imported: False")
    assert _files(tmp_path / "model") == files  # not written again
    # An export cut short (model.json, written last, is missing) is done again.
    (tmp_path / "model" / "model.json").unlink()
    redo = run_example_module(EXAMPLE, ck, model, EXPORT_ARGS, wrapper=_REPORT_SKLEARN)
    assert redo.returncode == 0, redo.output
    assert "already in" not in redo.output
    assert json.loads((tmp_path / "model" / "model.json").read_text())["steps"] == 2


def test_every_default_the_help_states_is_the_one_the_option_takes() -> None:
    """``python -m trainer.task --help`` states no default its option does not have."""
    listing = (
        "import json\n"
        "from trainer.task import build_parser\n"
        "print(json.dumps([[a.option_strings, a.default, a.help or '']\n"
        "                  for a in build_parser()._actions if a.option_strings]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", listing], cwd=EXAMPLE, capture_output=True, text=True, check=True
    )
    stated = 0
    for options, default, text in json.loads(done.stdout):
        match = re.search(r"\bdefault:? (-?\d+(?:\.\d+)?)\b", text)
        if match is None:
            continue
        stated += 1
        assert default is not None and float(default) == float(match.group(1)), (
            f"{options[0]}: its help says default {match.group(1)}, its default is {default!r}"
        )
    assert stated >= 3  # --checkpoint-every, --step-seconds, --steps-per-epoch
