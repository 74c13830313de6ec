"""Which state trees the torch adapter stores: what ``torch.load(weights_only=True)`` reads back.

Runs without torch: the rule walks the tree against whatever class is torch's tensor type.
"""

from __future__ import annotations

import collections

from kfp_spot.trainer.adapters import _tensor_count


class Tensor:
    """Stands in for ``torch.Tensor``: the rule takes the tensor type as an argument."""


def test_an_optimizers_state_dict_counts_its_tensors() -> None:
    # The shape of Adam's state_dict(): int keys, nested dicts, a list of groups with numbers.
    state = {
        "state": {0: {"step": Tensor(), "exp_avg": Tensor(), "exp_avg_sq": Tensor()}},
        "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999), "params": [0], "foreach": None}],
    }
    assert _tensor_count(state, Tensor) == 3
    assert _tensor_count(collections.OrderedDict(w=Tensor(), b=Tensor()), Tensor) == 2


def test_a_tree_weights_only_loading_cannot_read_back_is_not_torch_state() -> None:
    assert _tensor_count({"w": Tensor(), "extra": object()}, Tensor) == -1
    assert _tensor_count({(0, 1): Tensor()}, Tensor) == -1  # a tuple key
    assert _tensor_count({"w": Tensor(), "seen": {1, 2}}, Tensor) == -1  # a set

    deep: dict[str, object] = {"w": Tensor()}
    for _ in range(40):
        deep = {"next": deep}
    assert _tensor_count(deep, Tensor) == -1


def test_plain_values_alone_hold_no_tensor() -> None:
    assert _tensor_count({"lr": 0.1, "groups": [{"params": [0, 1]}]}, Tensor) == 0
