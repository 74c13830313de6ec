"""The Lightning callback against a recorded trace of Lightning's calls (torch is not installed).

Lightning's ``Callback`` imports torch, which is not installable here at a reasonable size, so
this test puts a stand-in ``lightning.pytorch`` module with the same ``Callback`` hooks in
``sys.modules`` and replays the calls ``Trainer.fit`` makes, in the order of Lightning 2.6
(``trainer/trainer.py`` ``_run``, ``loops/fit_loop.py``, ``loops/training_epoch_loop.py``,
``trainer/call.py`` ``_call_and_handle_interrupt``): ``setup(stage="fit")``, ``on_fit_start``,
``on_train_start``, per epoch ``on_train_epoch_start``, per batch ``on_train_batch_start`` /
``on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)`` then a check of
``trainer.should_stop``, ``on_train_epoch_end``, ``on_train_end``, ``on_fit_end``, ``teardown``;
an exception raised in a hook reaches ``on_exception`` and is re-raised. ``trainer.save_checkpoint``
writes one file, as Lightning's default strategy does. What was not run for real: Lightning
itself (its checkpoint contents, distributed strategies).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import pytest

from kfp_spot import checkpoints


class _Callback:
    """The hooks of lightning.pytorch.Callback that the integration overrides or relies on."""

    def setup(self, trainer, pl_module, stage):
        pass

    def teardown(self, trainer, pl_module, stage):
        pass

    def on_fit_start(self, trainer, pl_module):
        pass

    def on_train_start(self, trainer, pl_module):
        pass

    def on_train_epoch_start(self, trainer, pl_module):
        pass

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        pass

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pass

    def on_train_epoch_end(self, trainer, pl_module):
        pass

    def on_train_end(self, trainer, pl_module):
        pass

    def on_fit_end(self, trainer, pl_module):
        pass

    def on_exception(self, trainer, pl_module, exception):
        pass


@pytest.fixture
def integration(monkeypatch):
    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    pytorch.Callback = _Callback
    lightning.pytorch = pytorch
    monkeypatch.setitem(sys.modules, "lightning", lightning)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", pytorch)
    monkeypatch.delitem(sys.modules, "kfp_spot.trainer.integrations.lightning", raising=False)
    module = importlib.import_module("kfp_spot.trainer.integrations.lightning")
    yield module
    sys.modules.pop("kfp_spot.trainer.integrations.lightning", None)


class ReplayTrainer:
    """Trainer.fit's callback calls, with a deterministic model and a one-file checkpoint."""

    def __init__(self, callbacks, max_epochs=3, batches=8, notice_at=None):
        self.callbacks = callbacks
        self.max_epochs, self.batches, self.notice_at = max_epochs, batches, notice_at
        self.global_step, self.current_epoch, self.should_stop = 0, 0, False
        self.weights = 1.0
        self.callback_metrics = {"train_loss": 0.5}
        self.calls: list[str] = []

    def save_checkpoint(self, filepath):
        Path(filepath).write_text(json.dumps({"w": self.weights, "global_step": self.global_step}))

    def _hook(self, name, *args):
        self.calls.append(name)
        for cb in self.callbacks:
            getattr(cb, name)(self, None, *args)

    def fit(self, ckpt_path=None):
        try:
            self._hook("setup", "fit")
            if ckpt_path is not None:
                saved = json.loads(Path(ckpt_path).read_text())
                self.weights, self.global_step = saved["w"], saved["global_step"]
            self._hook("on_fit_start")
            self._hook("on_train_start")
            start_epoch, start_batch = divmod(self.global_step, self.batches)
            for epoch in range(start_epoch, self.max_epochs):
                self.current_epoch = epoch
                self._hook("on_train_epoch_start")
                for batch_idx in range(start_batch if epoch == start_epoch else 0, self.batches):
                    self._hook("on_train_batch_start", None, batch_idx)
                    self.weights = self.weights * 0.99 + 1.0 / (self.global_step + 1)
                    self.global_step += 1
                    if self.global_step == self.notice_at:
                        self.callbacks[0].manager.notice.request("SIGTERM (test)")
                    self._hook("on_train_batch_end", None, None, batch_idx)
                    if self.should_stop:
                        break
                self._hook("on_train_epoch_end")
                if self.should_stop:
                    break
            self._hook("on_train_end")
            self._hook("on_fit_end")
            self._hook("teardown", "fit")
        except BaseException as exc:
            self._hook("on_exception", exc)
            self._hook("teardown", "fit")
            raise


def test_notice_saves_commits_and_exits_then_fit_resumes_from_ckpt_path(integration, tmp_path):
    clean_cb = integration.SpotLightningCallback(str(tmp_path / "clean"), every_n_steps=10)
    clean = ReplayTrainer([clean_cb])
    clean.fit(ckpt_path=clean_cb.ckpt_path())
    assert clean.global_step == 24
    assert checkpoints.list_steps(str(tmp_path / "clean")) == [10, 20, 24]

    root = tmp_path / "run"
    spot = integration.SpotLightningCallback(str(root), every_n_steps=10)
    first = ReplayTrainer([spot], notice_at=13)
    with pytest.raises(SystemExit) as exited:
        first.fit(ckpt_path=spot.ckpt_path())
    assert exited.value.code == 143
    assert "on_exception" in first.calls and "on_train_end" not in first.calls
    assert checkpoints.list_steps(str(root)) == [10, 13]
    manifest = checkpoints.verify(str(root), 13)
    assert [f.path for f in manifest.files] == ["lightning.ckpt"]
    assert manifest.metadata["metrics"] == {"train_loss": 0.5}

    again = integration.SpotLightningCallback(str(root), every_n_steps=10)
    assert again.ckpt_path() == str(root / "step-13" / "lightning.ckpt")
    second = ReplayTrainer([again])
    second.fit(ckpt_path=again.ckpt_path())
    assert second.global_step == 24 and second.weights == clean.weights
    records = checkpoints.read_attempt_records(str(root))
    assert [r.exit_reason for r in records] == ["preempted", "finished"]
    assert records[1].first_step == 13


def test_without_exit_the_trainer_is_asked_to_stop(integration, tmp_path):
    spot = integration.SpotLightningCallback(str(tmp_path), exit_on_preemption=False)
    trainer = ReplayTrainer([spot], notice_at=5)
    trainer.fit()
    assert trainer.should_stop and spot.preempted and trainer.global_step == 5
    assert checkpoints.list_steps(str(tmp_path)) == [5]
    with pytest.raises(ValueError, match="every_n_steps must be an int >= 1"):
        integration.SpotLightningCallback(str(tmp_path), every_n_steps=0)
