"""A PyTorch loop checkpoints its optimizer's state_dict() as it does its model's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kfp_spot.trainer import CheckpointManager

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)


def test_optimizer_state_dict_round_trips_and_resumes_exactly(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 3), torch.randn(16, 1)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    step()
    with CheckpointManager(str(tmp_path), handle_signals=False) as ckpt:
        ckpt.save(1, {"model": model.state_dict(), "optimizer": opt.state_dict()})
        restored = ckpt.restore()
    assert restored is not None
    assert restored.manifest.metadata["state"]["optimizer"]["adapter"] == "torch"

    model2 = torch.nn.Linear(3, 1)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    model2.load_state_dict(restored.state["model"])
    opt2.load_state_dict(restored.state["optimizer"])
    assert opt2.param_groups[0]["lr"] == 0.01  # the hyper-parameters came back too
    step()
    opt2.zero_grad()
    torch.nn.functional.mse_loss(model2(x), y).backward()
    opt2.step()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)  # Adam's moments restored: the next update is the same


def test_a_tree_torch_cannot_read_back_safely_is_still_refused(tmp_path: Path) -> None:
    import torch

    from kfp_spot.trainer.adapters import StateEncodingError

    class Config:
        pass

    with (
        CheckpointManager(str(tmp_path), handle_signals=False) as ckpt,
        pytest.raises(StateEncodingError, match=r"state\['extra'\]"),
    ):
        ckpt.save(1, {"extra": {"w": torch.zeros(2), "cfg": Config()}})
