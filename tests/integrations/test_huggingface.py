"""The Hugging Face callback against transformers' real callback machinery (torch not needed).

``transformers.Trainer`` itself needs torch, which is not installable here at a reasonable size.
Everything else is real: ``TrainerCallback`` (the base class), ``CallbackHandler`` with the
``DefaultFlowCallback`` every Trainer has (it decides ``should_save`` from ``save_steps``),
``TrainingArguments``, ``TrainerState`` (saved to and loaded from ``trainer_state.json``) and
``TrainerControl``. :class:`ReplayTrainer` makes the calls the Trainer makes, in its order, as
recorded from transformers 5.x ``trainer.py`` (``_inner_training_loop``,
``_maybe_log_save_evaluate``, ``_save_checkpoint``, ``_load_from_checkpoint``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kfp_spot import checkpoints

if TYPE_CHECKING:
    from transformers import TrainingArguments

    from kfp_spot.trainer.integrations.huggingface import SpotTrainerCallback

# transformers takes a second of CPU to import: the module does not import it (every xdist worker
# collects every module), only the tests do, through the ``transformers`` fixture.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)

WEIGHTS = "model.json"  # stands in for model.safetensors / optimizer.pt / rng_state.pth


@pytest.fixture(scope="module")
def transformers():
    """transformers in this process. Module-scoped, so this module's tests share one worker
    (tests/conftest.py groups them): it is imported by one worker, not by all."""
    return pytest.importorskip("transformers")


def spot_callback(*args, **kwargs) -> SpotTrainerCallback:
    from kfp_spot.trainer.integrations.huggingface import SpotTrainerCallback

    return SpotTrainerCallback(*args, **kwargs)


class ReplayTrainer:
    """The Trainer's calls around steps and checkpoints, with a deterministic "model"."""

    def __init__(self, args: TrainingArguments, callbacks: list, notice_at: int | None = None):
        from transformers import DefaultFlowCallback
        from transformers.trainer_callback import CallbackHandler

        from kfp_spot.trainer.integrations.huggingface import SpotTrainerCallback

        self.args = args
        self.handler = CallbackHandler([DefaultFlowCallback, *callbacks], None, None, None, None)
        self.notice_at = notice_at
        self.spot = next(c for c in callbacks if isinstance(c, SpotTrainerCallback))
        self.weights = 1.0
        self.saved_folders: list[str] = []

    def _save_checkpoint(self) -> None:  # Trainer._save_checkpoint
        folder = Path(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / WEIGHTS).write_text(json.dumps({"w": self.weights}))
        self.state.save_to_json(str(folder / "trainer_state.json"))
        self.saved_folders.append(folder.name)

    def train(self, resume_from_checkpoint: str | None = None) -> None:
        from transformers import TrainerControl, TrainerState

        args = self.args
        self.state = TrainerState()
        self.control = TrainerControl()
        if resume_from_checkpoint is not None:  # Trainer._load_from_checkpoint + state
            self.state = TrainerState.load_from_json(
                os.path.join(resume_from_checkpoint, "trainer_state.json")
            )
            self.weights = json.loads(Path(resume_from_checkpoint, WEIGHTS).read_text())["w"]
        self.state.max_steps = args.max_steps
        self.state.save_steps = args.save_steps
        self.state.logging_steps = args.logging_steps
        self.state.eval_steps = args.eval_steps or args.logging_steps
        h = self.handler
        self.control = h.on_train_begin(args, self.state, self.control)
        for epoch in range(int(self.state.epoch or 0), 1000):
            self.control = h.on_epoch_begin(args, self.state, self.control)
            while self.state.global_step < args.max_steps:
                self.control = h.on_step_begin(args, self.state, self.control)
                self.weights = self.weights * 1.01 + 1.0 / (self.state.global_step + 1)
                self.state.global_step += 1
                self.state.epoch = epoch + self.state.global_step / args.max_steps
                self.state.log_history.append({"loss": 1.0 / self.weights, "step": 0})
                if self.state.global_step == self.notice_at:
                    self.spot.manager.notice.request("SIGTERM (test)")
                self.control = h.on_step_end(args, self.state, self.control)
                if self.control.should_save:  # _maybe_log_save_evaluate
                    self._save_checkpoint()
                    self.control = h.on_save(args, self.state, self.control)
                if self.control.should_epoch_stop or self.control.should_training_stop:
                    break
            self.control = h.on_epoch_end(args, self.state, self.control)
            if self.control.should_training_stop or self.state.global_step >= args.max_steps:
                break
        self.control = h.on_train_end(args, self.state, self.control)


def make_args(tmp_path: Path) -> TrainingArguments:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(tmp_path / "hf-output"),
        save_strategy="steps",
        save_steps=5,
        max_steps=23,
        logging_steps=5,
        report_to=[],
    )


def run(tmp_path: Path, notice_at: int | None = None, **kwargs) -> ReplayTrainer:
    spot = spot_callback(str(tmp_path / "ckpt"), grace_period=30, **kwargs)
    trainer = ReplayTrainer(make_args(tmp_path), [spot], notice_at=notice_at)
    trainer.train(resume_from_checkpoint=spot.resume_from_checkpoint())
    return trainer


def test_the_callback_is_a_real_trainer_callback(transformers):
    from kfp_spot.trainer.integrations.huggingface import SpotTrainerCallback

    spot_type = SpotTrainerCallback
    assert issubclass(spot_type, transformers.TrainerCallback)


def test_notice_saves_mid_interval_stops_exits_143_and_the_next_attempt_resumes(
    transformers, tmp_path
):
    clean = run(tmp_path / "clean")
    assert clean.state.global_step == 23
    assert checkpoints.list_steps(str(tmp_path / "clean" / "ckpt")) == [15, 20, 23]  # keep_last=3

    root = tmp_path / "run" / "ckpt"
    flushed: list[list[int]] = []
    hook = lambda: flushed.append(checkpoints.list_steps(str(root)))  # noqa: E731
    with pytest.raises(SystemExit) as exited:
        run(tmp_path / "run", notice_at=7, on_preemption=hook)
    assert exited.value.code == 143
    assert checkpoints.list_steps(str(root)) == [5, 7]  # step 7 saved on the notice
    assert flushed == [[5, 7]]  # the cleanup hook ran after the commit
    manifest = checkpoints.verify(str(root), 7)
    assert manifest.metadata["layout"] == "directory"
    assert sorted(f.path for f in manifest.files) == ["model.json", "trainer_state.json"]

    resumed = run(tmp_path / "run")
    assert resumed.state.global_step == 23
    assert resumed.weights == clean.weights  # the same arithmetic from the same state
    records = checkpoints.read_attempt_records(str(root))
    assert [r.exit_reason for r in records] == ["preempted", "finished"]
    assert records[1].first_step == 7


def test_a_fresh_start_resumes_from_nothing_and_a_torn_step_is_skipped(transformers, tmp_path):
    spot = spot_callback(str(tmp_path / "ckpt"))
    assert spot.resume_from_checkpoint() is None
    run(tmp_path)
    (tmp_path / "ckpt" / "step-23" / "model.json").write_text('{"w": 0}')  # corrupt the newest
    again = spot_callback(str(tmp_path / "ckpt"))
    assert again.resume_from_checkpoint() == str(tmp_path / "ckpt" / "step-20")
