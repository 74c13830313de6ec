"""State adapters, the save interval (Young-Daly) and the failpoint spec."""

from __future__ import annotations

import collections
import enum
import importlib.util
import io
import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kfp_spot.checkpoints import AttemptRecord
from kfp_spot.trainer import (
    CheckpointManager,
    SaveInterval,
    adapters,
    estimate_mtbp,
    failpoints,
    young_daly,
)
from kfp_spot.trainer.interval import IntervalPolicy


def _round_trip(value):
    files, index = adapters.encode_state({"v": value})
    return adapters.decode_state(files.__getitem__, index)["v"], index["v"]["adapter"]


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.float64, np.float32, np.int64, np.uint8, np.bool_, np.complex64]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=6),
    )
)
def test_numpy_arrays_round_trip_bitwise(array: np.ndarray) -> None:
    back, adapter = _round_trip(array)
    assert adapter == "numpy"
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()  # NaNs and signed zeros included
    assert back.flags.writeable  # training code updates restored weights in place
    files, _ = adapters.encode_state({"v": array})
    reference = io.BytesIO()
    np.save(reference, array, allow_pickle=False)
    assert bytes(files["v.npy"]) == reference.getvalue()  # a plain .npy file


@settings(max_examples=40, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_json_values_round_trip_exactly(value) -> None:
    back, adapter = _round_trip(value)
    assert adapter == "json"
    assert back == value
    assert repr(back) == repr(value)  # floats bit for bit, bools stay bools


def test_rngs_continue_where_they_stopped() -> None:
    gen = np.random.default_rng(7)
    gen.random(3)
    legacy = np.random.RandomState(3)
    legacy.normal(size=5)  # leaves a cached Gaussian
    py = random.Random(11)
    py.random()
    for rng, draw in [
        (gen, lambda r: r.random(5).tolist()),
        (np.random.Generator(np.random.MT19937(5)), lambda r: r.integers(0, 100, 5).tolist()),
        (legacy, lambda r: r.normal(size=5).tolist()),
        (py, lambda r: [r.random() for _ in range(5)]),
    ]:
        back, _ = _round_trip(rng)
        assert draw(back) == draw(rng)


def test_dict_of_arrays_and_bytes() -> None:
    value = {"W": np.arange(6.0).reshape(2, 3), "b": np.zeros(3, dtype=np.float32)}
    back, adapter = _round_trip(value)
    assert adapter == "numpy-dict"
    assert {k: v.tobytes() for k, v in back.items()} == {k: v.tobytes() for k, v in value.items()}
    assert _round_trip(bytearray(b"\x00raw"))[0] == b"\x00raw"


def test_dict_of_arrays_keeps_keys_that_are_savez_arguments() -> None:
    value = {"file": np.arange(3.0), "allow_pickle": np.ones(2), "w": np.zeros(1)}
    back, adapter = _round_trip(value)
    assert adapter == "numpy-dict"
    assert list(back) == list(value)
    assert all(back[k].tobytes() == v.tobytes() for k, v in value.items())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.text(st.characters(codec="utf-8"), max_size=6), min_size=1, max_size=3, unique=True)
)
def test_dict_of_arrays_gives_each_key_its_own_array(names: list[str]) -> None:
    # numpy.load's NpzFile looks npz["a.npy"] up as the member "a.npy", the key "a"'s: of the
    # keys "a" and "a.npy" both came back with a's array.
    keys = [*names, *(f"{name}.npy" for name in names if f"{name}.npy" not in names)]
    value = {key: np.full(2, index, dtype=np.int16) for index, key in enumerate(keys)}
    try:
        back, adapter = _round_trip(value)
    except adapters.StateEncodingError as exc:  # an .npz name cannot hold NUL
        bad = next(key for key in keys if "\x00" in key)
        assert f"state['v'][{bad!r}] is a key holding NUL" in str(exc)
        return
    assert adapter == "numpy-dict"
    assert list(back) == keys
    assert all(back[key].tobytes() == array.tobytes() for key, array in value.items())


class _Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (
            lambda: {"lr": [np.float64(0.1)]},
            r"state\['v'\]\['lr'\]\[0\] is a numpy\.float64: use a Python",
        ),
        (lambda: {"name": np.str_("mlp")}, r"\['name'\] is a numpy\.str_: use a Python value"),
        (
            lambda: {"level": _Level.LOW},
            r"\['level'\] is a .*_Level, which JSON would give back as a plain int",
        ),
        (lambda: _Level.LOW, r"state\['v'\] is a .*_Level, .* plain int: use int\(state\['v'\]\)"),
        (lambda: collections.OrderedDict(lr=0.1), r"is a collections\.OrderedDict, .* plain dict"),
        (lambda: float("inf"), r"state\['v'\] is inf, which JSON does not hold.*numpy\.float64"),
        (
            lambda: np.ma.array([1, 2], mask=[0, 1]),
            # NumPy 2 names the class where it is public; 1.26 (sklearn-cpu.1-6's) where defined
            r"state\['v'\] is a numpy\.ma(\.core)?\.MaskedArray, a subclass",
        ),
        (lambda: {"w": np.matrix([[1.0]])}, r"state\['v'\]\['w'\] is a numpy\.matrix, a subclass"),
        (
            lambda: {"w": np.array([None])},
            r"state\['v'\]\['w'\] is a numpy array of Python objects",
        ),
        (lambda: np.bytes_(b"ab\x00"), r"numpy\.bytes_ ending in NUL"),
        (lambda: {"\ud800": np.zeros(1)}, r"\['\\ud800'\] is a key that is not valid Unicode"),
        (lambda: 1 + 2j, r"state\['v'\] is \(1\+2j\), .*numpy\.complex128"),
    ],
)
@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_a_value_restore_would_change_is_refused_naming_it(
    make: Callable[[], Any], named: str
) -> None:
    # Stored as JSON or .npy, each came back as another type (an int, a float, a dict, a plain
    # ndarray without its mask) or another value, without a word.
    with pytest.raises(adapters.StateEncodingError, match=named):
        adapters.encode_state({"v": make()})


def test_numpy_byte_strings_and_memmaps_come_back_as_they_were(tmp_path: Path) -> None:
    back, adapter = _round_trip(np.bytes_(b"a\x00b"))
    assert (adapter, type(back), back) == ("numpy-scalar", np.bytes_, b"a\x00b")
    mapped = np.lib.format.open_memmap(tmp_path / "m.npy", mode="w+", dtype=">f4", shape=(3,))
    mapped[:] = 1.5
    back, _ = _round_trip(mapped)  # the array it maps, as a plain ndarray
    assert type(back) is np.ndarray and back.dtype == ">f4" and back.tolist() == [1.5] * 3


def test_state_keys_that_some_disk_cannot_hold_are_refused_before_writing() -> None:
    with pytest.raises(ValueError, match="differ only in case"):
        adapters.encode_state({"W": np.ones(2), "w": np.zeros(2)})  # one file on a Mac
    with pytest.raises(ValueError, match="differ only in case"):
        adapters.encode_state({"caf\u00e9": 1, "cafe\u0301": 2})  # NFC and NFD
    with pytest.raises(ValueError, match="too long"):
        adapters.encode_state({"k" * 300: 1})
    with pytest.raises(ValueError, match=r"state key 'manifest'"):
        adapters.encode_state({"manifest": {"a": 1}})
    # Manifest.json is manifest.json on a Mac: the manifest, written last, overwrote it
    with pytest.raises(ValueError, match=r"^state key 'Manifest' .* 'manifest.json' \(on a case"):
        adapters.encode_state({"Manifest": {"a": 1}})
    with pytest.raises(ValueError, match="state is empty"):
        adapters.encode_state({})


@pytest.mark.parametrize("key", ["\ud800", "w\udc80"])
def test_a_state_key_that_is_no_valid_unicode_is_refused_before_anything_is_removed(
    tmp_path: Path, key: str
) -> None:
    # A lone surrogate (a name read with surrogateescape) failed in the middle of the write
    # (UnicodeEncodeError) after the step's earlier commit had been removed, or ("\udc80") was
    # written locally as a byte no Cloud Storage object name holds.
    CheckpointManager(str(tmp_path), handle_signals=False).save(1, {"w": np.ones(2)})
    fresh = CheckpointManager(str(tmp_path), handle_signals=False)  # has not restored step 1
    with pytest.raises(ValueError, match="not valid Unicode"):
        fresh.save(1, {"a": 1, key: 2})
    restored = fresh.restore()
    assert restored is not None and restored.step == 1 and list(restored.state) == ["w"]


def _holds_itself() -> dict[str, Any]:
    cycle: dict[str, Any] = {"lr": 0.1}
    cycle["self"] = cycle
    return cycle


def _nested(depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


@pytest.mark.parametrize("value", [_holds_itself(), _nested(5000)])
def test_a_value_that_holds_itself_or_nests_thousands_deep_is_named_not_a_recursion_error(
    tmp_path: Path, value: Any
) -> None:
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False)
    with pytest.raises(adapters.StateEncodingError, match=r"state\['hparams'\] holds itself"):
        ckpt.save(1, {"w": np.zeros(2), "hparams": value})
    with pytest.raises(ValueError, match=r"metrics\['m'\] = .* is not a JSON value"):
        ckpt.save(1, {"w": np.zeros(2)}, metrics={"m": value})
    assert ckpt.restore() is None


def test_metrics_nested_past_the_bound_are_refused_on_every_python(tmp_path: Path) -> None:
    # The bound was json's RecursionError, which Python 3.13's json reaches far deeper than
    # 3.11's: there a metric nested 5000 deep was taken and its manifest grew to 25 MB.
    from kfp_spot.trainer.writer import METRICS_NESTING

    deepest = _nested(METRICS_NESTING - 1)  # the outer list and METRICS_NESTING - 1 inside it
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False)
    with pytest.raises(ValueError, match=rf"metrics\['m'\] = .* nested at most {METRICS_NESTING}"):
        ckpt.save(1, {"w": np.zeros(2)}, metrics={"m": [deepest]})
    ckpt.save(1, {"w": np.zeros(2)}, metrics={"m": deepest})
    restored = ckpt.restore()
    assert restored is not None and restored.metrics["m"] == deepest


def test_a_text_metric_is_text_whatever_brackets_it_holds(tmp_path: Path) -> None:
    # A string was read as JSON text for the nesting bound: 101 "[" made a note "too deep".
    from kfp_spot.trainer.writer import METRICS_NESTING

    text = "[" * (METRICS_NESTING + 1) + ' "{ unbalanced'
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False)
    ckpt.save(1, {"w": np.zeros(2)}, metrics={"note": text, "notes": [text, {"k": text}]})
    restored = ckpt.restore()
    assert restored is not None
    assert restored.metrics["note"] == text and restored.metrics["notes"] == [text, {"k": text}]


def test_numpy_scalars_keep_their_type() -> None:
    for value in (np.float32(1.5), np.int64(-3), np.bool_(True), np.complex64(1 + 2j)):
        back, adapter = _round_trip(value)
        assert adapter == "numpy-scalar"
        assert type(back) is type(value) and back == value


def test_object_arrays_and_non_finite_json_are_refused() -> None:
    with pytest.raises(adapters.StateEncodingError, match="pickle"):
        adapters.encode_state({"a": np.array([object()])})
    with pytest.raises(adapters.StateEncodingError, match=r"state\['nan'\]"):
        adapters.encode_state({"nan": float("nan")})


class _DeviceArray:
    """An array of another library (a JAX array, a Keras variable): NumPy converts it."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.zeros(2)


@pytest.mark.parametrize(
    ("hparams", "named"),
    [
        ({"lr": 0.1, "hidden": (64, 32)}, r"state\['hparams'\]\['hidden'\] is a tuple.*use a list"),
        ({"lr": np.float32(0.1)}, r"\['lr'\] is a numpy\.float32: use a Python value"),
        ({"clip": float("inf")}, r"\['clip'\] is inf, which JSON does not hold"),
        ({"lr": 0.1, 3: "x"}, r"state\['hparams'\] has the key 3 \(int\)"),
        # the key None was taken for "no bad key": the message named the whole dict
        ({"lr": 0.1, None: "x"}, r"state\['hparams'\] has the key None \(NoneType\); JSON"),
        ({None: np.zeros(2)}, r"state\['hparams'\] has the key None \(NoneType\): an \.npz"),
        ({"w": np.zeros(2), "step": 3}, r"\['w'\] is a NumPy array among values that are not"),
        ({"layer1": {"W": np.zeros(2)}}, r"\['layer1'\] is a dict of NumPy arrays inside"),
        ({"sched": {"milestones": [1, {2, 3}]}}, r"\['milestones'\]\[1\] is a set"),
        # a JAX array beside NumPy ones: the NumPy array was named as the one at fault
        ({"w": np.zeros(2), "b": _DeviceArray()}, r"\['b'\] is a .*_DeviceArray, not a NumPy"),
        ({"layers": [_DeviceArray()]}, r"\['layers'\]\[0\] is a .*: store numpy\.asarray"),
        # an RNG kept with the step counter: the adapter that stores it wants a key of its own
        (
            {"rng": np.random.default_rng(0), "step": 3},
            r"\['rng'\] is a .*Generator, which the 'numpy-generator' adapter stores as a state",
        ),
    ],
)
def test_a_dict_no_adapter_stores_names_the_item_at_fault(
    tmp_path: Path, hparams: dict[Any, Any], named: str
) -> None:
    # "state['hparams'] is a builtins.dict, which no adapter stores" said nothing of which of
    # a hyper-parameter dict's values was the matter, while dicts are stored.
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False)
    with pytest.raises(adapters.StateEncodingError, match=named) as info:
        ckpt.save(1, {"w": np.zeros(3), "hparams": hparams})
    assert "builtins.dict" not in str(info.value)
    assert ckpt.restore() is None  # nothing committed


def test_sklearn_estimator_round_trips(tmp_path: Path) -> None:
    from sklearn.linear_model import SGDClassifier

    X = np.random.default_rng(0).normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = SGDClassifier(random_state=0).partial_fit(X, y, classes=[0, 1])
    with pytest.raises(adapters.StateEncodingError, match="allow_pickle=True"):
        CheckpointManager(str(tmp_path), handle_signals=False).save(1, {"clf": clf})
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False, allow_pickle=True)
    ckpt.save(1, {"clf": clf})
    assert CheckpointManager(str(tmp_path), handle_signals=False).restore() is None  # not allowed
    back = ckpt.restore().state["clf"]
    assert back.coef_.tobytes() == clf.coef_.tobytes()
    back.partial_fit(X, y)
    clf.partial_fit(X, y)
    assert back.coef_.tobytes() == clf.coef_.tobytes()  # training goes on identically


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_state_dict_round_trips_without_pickle(tmp_path: Path) -> None:
    import torch

    model = torch.nn.Linear(4, 2)
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False)
    ckpt.save(1, {"model": model.state_dict(), "t": torch.arange(5)})
    restored = ckpt.restore()
    index = restored.manifest.metadata["state"]
    assert index["model"]["adapter"] in ("safetensors", "torch")
    for key, value in model.state_dict().items():
        assert torch.equal(restored.state["model"][key], value)
    assert torch.equal(restored.state["t"], torch.arange(5))


def test_torch_adapter_is_lazy() -> None:
    # Without torch imported no value can be a tensor, and matching never imports torch.
    import sys

    had = "torch" in sys.modules
    assert adapters.get("torch").matches({"a": np.zeros(2)}) is False
    assert adapters.adapter_for("a", {"a": np.zeros(2)}).name == "numpy-dict"
    assert ("torch" in sys.modules) == had


def test_unknown_adapter_on_restore_names_the_known_ones() -> None:
    with pytest.raises(adapters.StateEncodingError, match="numpy-dict"):
        adapters.decode_state(lambda name: b"", {"x": {"file": "x.bin", "adapter": "nope"}})


def test_registered_adapter_wins() -> None:
    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    adapters.register(
        adapters.Adapter(
            "test-point",
            ".pt.txt",
            lambda v: isinstance(v, Point),
            lambda v: str(v.x).encode(),
            lambda b: Point(int(b)),
        )
    )
    back, adapter = _round_trip(Point(41))
    assert adapter == "test-point" and back.x == 41
    with pytest.raises(ValueError, match="already registered"):
        adapters.register(adapters.get("test-point"))


# -- interval ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("100", SaveInterval(steps=100)),
        (7, SaveInterval(steps=7)),
        ("30s", SaveInterval(seconds=30.0)),
        ("1.5m", SaveInterval(seconds=90.0)),
        ("2h", SaveInterval(seconds=7200.0)),
        ("auto", SaveInterval(auto=True)),
        (" AUTO ", SaveInterval(auto=True)),
    ],
)
def test_interval_parse(spec, expected: SaveInterval) -> None:
    assert SaveInterval.parse(spec) == expected


@pytest.mark.parametrize("spec", ["0", "-5", "soon", "10 parsecs", "0s", "", True, 0, -5, "\u00b2"])
def test_interval_parse_rejects(spec) -> None:
    with pytest.raises(ValueError, match="interval"):
        SaveInterval.parse(spec)


def test_young_daly() -> None:
    assert young_daly(2.0, 100.0) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="cost and mtbp"):
        young_daly(0.0, 10.0)


def _records(*docs: dict[str, Any]) -> list[AttemptRecord]:
    """Attempt records as their files hold them (the fields that matter here)."""
    return [AttemptRecord.from_json({"attempt_id": f"a{i}", **d}) for i, d in enumerate(docs)]


def test_mtbp_estimate_learns_from_attempts() -> None:
    assert estimate_mtbp([], prior=600.0) == 600.0
    assert estimate_mtbp([], prior=600.0, current_exposure=900.0) == 900.0
    records = _records(
        {"start_time": 0.0, "end_time": 30.0, "exit_reason": "preempted"},
        {"start_time": 40.0, "end_time": None, "updated_time": 70.0, "exit_reason": None},
        {"start_time": 80.0, "end_time": 110.0, "exit_reason": "preempted"},
        {"start_time": 120.0, "end_time": 130.0, "exit_reason": "error"},
    )
    # 100 s of exposure over 3 preemptions (the error is exposure, not a preemption)
    assert estimate_mtbp(records, prior=600.0) == pytest.approx(100.0 / 3)
    assert estimate_mtbp(records, prior=600.0, current_exposure=20.0) == pytest.approx(40.0)


def test_policy_steps_are_aligned_to_absolute_steps() -> None:
    policy = IntervalPolicy(SaveInterval(steps=10))
    assert [s for s in range(1, 35) if policy.due(s, 0.0)] == [10, 20, 30]


def test_policy_seconds() -> None:
    policy = IntervalPolicy(SaveInterval(seconds=5.0), now=100.0)
    assert not policy.due(1, 104.0)
    assert policy.due(2, 105.0)
    policy.record_save(0.1, 105.0)
    assert not policy.due(3, 109.0)


def test_policy_auto_follows_young_daly_and_adapts() -> None:
    records = _records({"start_time": 0.0, "end_time": 100.0, "exit_reason": "preempted"})
    policy = IntervalPolicy(SaveInterval(auto=True, mtbp=100.0), records, now=1000.0)
    assert policy.due(1, 1000.0)  # nothing measured yet: save once to learn the cost
    policy.record_save(0.5, 1000.0)
    mtbp = 100.0  # one preemption in 100 s
    target = math.sqrt(2 * 0.5 * mtbp)
    assert policy.target_seconds(1000.0) == pytest.approx(target)
    assert not policy.due(2, 1000.0 + target * 0.9)
    assert policy.due(3, 1000.0 + target * 1.2)  # the estimate grows a little meanwhile
    # a long uninterrupted attempt raises the estimate, so saves spread out
    assert policy.target_seconds(5000.0) > target
    # the next attempt starts from the cost this one measured
    records += _records({"start_time": 100.0, "end_time": 200.0, "save_stall_seconds_mean": 0.5})
    nxt = IntervalPolicy(SaveInterval(auto=True, mtbp=100.0), records, now=0.0)
    assert nxt.save_cost == 0.5
    assert not nxt.due(1, 0.0)


# -- failpoints --------------------------------------------------------------------------------
def test_failpoint_spec() -> None:
    assert failpoints.parse("kill@save-mid:40, term@step:7") == {
        ("save-mid", 40): "kill",
        ("step", 7): "term",
    }
    for bad in ["kill@save-mid", "explode@step:1", "kill@nowhere:1", "kill@step:x"]:
        with pytest.raises(ValueError, match="KFP_SPOT_FAILPOINTS"):
            failpoints.parse(bad)


_SLOW_ASYNC_RUN = r"""
import sys, time
from kfp_spot import checkpoints
from kfp_spot.trainer import CheckpointManager

write_step = checkpoints.write_step

def slow_write_step(*args, **kwargs):  # storage far slower than the loop's steps
    time.sleep(1.0)
    return write_step(*args, **kwargs)

checkpoints.write_step = slow_write_step
# auto: the loop never waits for a background write (a fixed interval waits at its next save)
with CheckpointManager(sys.argv[1], interval="auto", async_save=True) as ckpt:
    step = 0
    while step < 400:
        step += 1
        ckpt.maybe_save(step, {"progress": {"step": step}})
        if ckpt.should_stop:
            print(f"stopped after step {step}", flush=True)
            sys.exit(143)
print("finished", flush=True)
"""


@pytest.mark.parametrize("action", ["term", "kill"])
def test_a_background_save_failpoint_lands_at_the_next_step(tmp_path: Path, action: str) -> None:
    """However far the loop could run during a slow async write, the signal lands at step 2."""
    import os
    import subprocess
    import sys

    ck = tmp_path / "ck"
    env = {**os.environ, failpoints.ENV: f"{action}@save-before-manifest:1"}
    run = subprocess.run(
        [sys.executable, "-c", _SLOW_ASYNC_RUN, str(ck)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if action == "term":
        assert run.returncode == 143, run.stdout + run.stderr
        assert "stopped after step 2" in run.stdout, run.stdout + run.stderr
    else:
        assert run.returncode == -9, run.stdout + run.stderr
        assert "finished" not in run.stdout
    # nothing newer than the final save on the notice (step 2) was ever started
    assert all(step <= 2 for step in checkpoints_steps(ck))


def checkpoints_steps(root: Path) -> list[int]:
    from kfp_spot import checkpoints

    return checkpoints.list_steps(str(root)) if root.exists() else []


def test_auto_without_a_hint_is_not_exposed_for_an_hour() -> None:
    """Before any preemption the estimate is the exposure so far, not a fixed hour."""
    assert SaveInterval.parse("auto").mtbp is None
    assert estimate_mtbp([], current_exposure=5.0) == 10.0  # twice the exposure so far
    assert estimate_mtbp([], current_exposure=0.0) >= 1.0  # a floor, never zero
    policy = IntervalPolicy(SaveInterval(auto=True), now=0.0)
    policy.record_save(0.2, 0.0)
    # a run preempted every few seconds has saved every second or so by then
    assert policy.target_seconds(4.0) == pytest.approx(2 * math.sqrt(0.2 * 4.0))
    assert policy.target_seconds(4.0) < 2.0
    # a run that is never preempted spaces its saves out as it goes
    assert policy.target_seconds(3600.0) == pytest.approx(2 * math.sqrt(0.2 * 3600.0))
    # the first preemption seen (in an earlier attempt's record) replaces the guess
    records = _records({"start_time": 0.0, "end_time": 8.0, "exit_reason": "preempted"})
    nxt = IntervalPolicy(SaveInterval(auto=True), records, now=100.0)
    assert nxt.mtbp(100.0) == pytest.approx(8.0)
    assert nxt.mtbp(108.0) == pytest.approx(16.0)  # and this attempt's exposure counts
    # a hint is used until the run has outlived it
    hinted = SaveInterval.parse("auto", mtbp=60)
    assert estimate_mtbp([], prior=hinted.mtbp, current_exposure=5.0) == 60.0


def test_sync_encoding_uses_the_arrays_own_memory() -> None:
    array = np.arange(1 << 16, dtype=np.float64)
    fortran = np.asfortranarray(np.arange(64.0 * 32).reshape(64, 32))
    files, index = adapters.encode_state({"w": array, "f": fortran})
    header, data = files["w.npy"]
    assert isinstance(header, bytes)
    assert np.shares_memory(np.asarray(data), array)  # nothing copied before the write
    assert np.shares_memory(np.asarray(files["f.npy"][1]), fortran)
    back = adapters.decode_state(files.__getitem__, index)["f"]
    assert back.flags.f_contiguous and (back == fortran).all()


def test_forged_npy_header_is_refused() -> None:
    files, index = adapters.encode_state({"w": np.zeros(16)})
    raw = bytearray(bytes(files["w.npy"]))
    raw = raw.replace(b"(16,)", b"(99,)")
    with pytest.raises(adapters.StateEncodingError, match="does not match the data size"):
        adapters.decode_state(lambda name: raw, index)


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.normal(size=(2049, 1023)).astype(np.float32),
        "é/bias": np.arange(7, dtype=np.int64),
        "half": rng.normal(size=1023).astype(np.float16),
        "fortran": np.asfortranarray(rng.normal(size=(33, 65))),
        "empty": np.zeros((0, 4), np.float64),
        "flags": rng.integers(0, 2, size=13).astype(bool),
    }


def test_a_dict_of_arrays_restores_in_place_holding_its_file_once(tmp_path: Path) -> None:
    # The .npz was read into memory, copied whole for zipfile, then each array copied out of
    # it: a restore held three times the state's size at its peak (an out-of-memory kill for a
    # state of a third of the VM's memory, which saved fine).
    import tracemalloc

    value = _arrays()
    with CheckpointManager(tmp_path, handle_signals=False, record_attempts=False) as ckpt:
        ckpt.save(1, {"params": value})
    path = tmp_path / "step-1" / "params.npz"
    with np.load(path, allow_pickle=False) as npz:  # numpy's own reader takes the file as is
        read = {k: npz[k].tobytes() for k in npz.files}
    assert read == {k: a.tobytes() for k, a in value.items()}
    size = path.stat().st_size
    CheckpointManager(tmp_path, handle_signals=False).restore()  # what it imports, imported
    tracemalloc.start()
    try:
        restored = CheckpointManager(tmp_path, handle_signals=False).restore()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert restored is not None
    back = restored.state["params"]
    assert list(back) == list(value)
    for key, array in value.items():
        assert back[key].dtype == array.dtype and back[key].shape == array.shape
        assert back[key].tobytes(order="A") == array.tobytes(order="A"), key
        assert back[key].flags.writeable and back[key].flags.aligned, key
    assert peak < size * 1.25, (peak, size)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed], ids=["savez", "compressed"])
def test_an_npz_written_without_aligned_members_still_restores(
    tmp_path: Path, save: Callable[..., None]
) -> None:
    # The .npz files of earlier versions (and numpy's own) have members at any offset.
    from kfp_spot import checkpoints

    value = {key.replace("/", "_"): array for key, array in _arrays().items()}
    files, index = adapters.encode_state({"params": value})
    plain = io.BytesIO()
    save(plain, **value)  # np.savez takes the keys as keyword arguments
    checkpoints.write_step(
        str(tmp_path), 1, {**files, "params.npz": plain.getvalue()}, metadata={"state": index}
    )
    restored = CheckpointManager(tmp_path, handle_signals=False).restore()
    assert restored is not None
    back = restored.state["params"]
    assert {k: a.tobytes(order="A") for k, a in back.items()} == {
        k: a.tobytes(order="A") for k, a in value.items()
    }
    assert all(array.flags.aligned and array.flags.writeable for array in back.values())


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_dict_of_arrays_saves_without_a_copy_of_its_file(
    tmp_path: Path, async_save: bool
) -> None:
    # The .npz was built whole in memory (a BytesIO, grown by reallocation) before it was
    # written: a save held the state twice at its peak, an out-of-memory kill on a VM sized for
    # the model. A synchronous save writes each array from its own memory; an async one holds
    # one snapshot copy (its design), and nothing beyond it.
    import tracemalloc

    rng = np.random.default_rng(3)
    value = {f"layer{i}": rng.random(1 << 18) for i in range(8)}  # 8 x 2 MiB of float64
    size = sum(array.nbytes for array in value.values())
    with CheckpointManager(
        tmp_path, handle_signals=False, record_attempts=False, async_save=async_save
    ) as ckpt:
        ckpt.save(1, {"params": {"warm": np.zeros(3)}})  # what a save imports, imported
        ckpt.wait()
        tracemalloc.start()
        try:
            ckpt.save(2, {"params": value})
            ckpt.wait()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    allowed = size if async_save else 0  # the async snapshot, where tracemalloc sees it
    assert peak < allowed + size // 8, (peak, size)
    with np.load(tmp_path / "step-2" / "params.npz", allow_pickle=False) as npz:
        assert {k: npz[k].tobytes() for k in npz.files} == {
            k: a.tobytes() for k, a in value.items()
        }


@pytest.mark.parametrize("where", ["array", "dict of arrays", "scalar"])
def test_an_array_of_a_dtype_npy_cannot_name_is_refused_not_restored_as_raw_bytes(
    where: str,
) -> None:
    # ml_dtypes' bfloat16 has no .npy name: the file said '|V2' and the restore gave back raw
    # two-byte voids, not the numbers saved.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    value = {"array": array, "dict of arrays": {"w": array}, "scalar": array[0]}[where]
    path = {"array": r"state\['v'\]", "dict of arrays": r"state\['v'\]\['w'\]"}
    with pytest.raises(adapters.StateEncodingError) as info:
        adapters.encode_state({"v": value})
    message = str(info.value)
    assert "\n" not in message
    assert re.match(
        path.get(where, r"state\['v'\]") + " is of dtype bfloat16, which a .npy", message
    )
    assert "view(numpy.uint16)" in message


def test_metrics_keys_that_are_not_strings_are_refused_not_stringified(tmp_path: Path) -> None:
    # {1: 0.5, "1": 0.7} was recorded as {"1": 0.7}: one metric silently lost.
    ckpt = CheckpointManager(str(tmp_path), handle_signals=False, record_attempts=False)
    with pytest.raises(ValueError, match=r"^metrics key 1 \(int\) must be a str.*use '1'$"):
        ckpt.save(1, {"x": 1}, metrics={1: 0.5, "1": 0.7})
    ckpt.save(1, {"x": 1}, metrics={"loss": np.float32(0.5), "nan": float("nan"), "tag": "a"})
    restored = CheckpointManager(str(tmp_path), handle_signals=False).restore()
    assert restored is not None
    assert restored.metrics["loss"] == 0.5 and restored.metrics["tag"] == "a"
    assert math.isnan(restored.metrics["nan"])


_HOSTILE_KEYS = st.one_of(
    st.sampled_from(["", "..", ".", "a/b", "../x", "ü", "a.npy", "manifest.json", "\0"]),
    st.text(max_size=4),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
)
_ARRAYS = st.one_of(
    hnp.arrays(
        st.sampled_from(["<f4", ">f4", ">i8", "?", "<c8", "<f2", "<U2", "|S2", ">M8[s]"]),
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
    ),
    st.builds(lambda a: np.asfortranarray(a.reshape(2, 3)), hnp.arrays(">f8", 6)),
    st.builds(lambda a: a[::2], hnp.arrays("<i4", 5)),  # not contiguous
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
    _ARRAYS,
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_HOSTILE_KEYS, inner, max_size=3),
        st.dictionaries(_HOSTILE_KEYS, _ARRAYS, min_size=1, max_size=3),
    ),
    max_leaves=8,
)


def _same(saved: Any, back: Any) -> bool:
    """Bitwise the same value: type, dtype (byte order included), shape, bytes, key order."""
    if type(saved) is not type(back) and not (type(saved) is np.ndarray is type(back)):
        return False
    if isinstance(saved, (np.ndarray, np.generic)):
        return (
            saved.dtype == back.dtype
            and saved.shape == back.shape
            and saved.tobytes() == back.tobytes()
        )
    if isinstance(saved, dict):
        return list(saved) == list(back) and all(_same(saved[k], back[k]) for k in saved)
    if isinstance(saved, (list, tuple)):
        return len(saved) == len(back) and all(map(_same, saved, back))
    if isinstance(saved, float) and math.isnan(saved):
        return math.isnan(back)
    return bool(saved == back) and (not isinstance(saved, float) or str(saved) == str(back))


@settings(max_examples=40, deadline=None)
@given(key=st.just("v") | _HOSTILE_KEYS, value=_VALUES)
def test_a_hostile_state_round_trips_bitwise_or_is_refused_in_one_line_naming_it(
    key: Any, value: Any
) -> None:
    try:
        files, index = adapters.encode_state({key: value})
    except adapters.StateEncodingError as exc:  # a value no adapter gives back the same
        message = str(exc)
        assert "\n" not in message and message.startswith(f"state[{key!r}]"), message
        assert "builtins.dict" not in message and "builtins.list" not in message, message
        return
    except ValueError as exc:  # a key that cannot name a file in the step's directory
        message = str(exc)
        assert "\n" not in message and repr(key)[:40] in message, message
        return
    assert all("/" not in name and not name.startswith(".") for name in files)
    back = adapters.decode_state(files.__getitem__, index)
    assert list(back) == [key] and _same(value, back[key]), (value, back[key])


def test_a_dict_of_many_small_arrays_is_one_part_to_write_and_large_ones_are_views() -> None:
    # Each array's data was a part of its own: an optimizer's 5,000 arrays of 100 floats were
    # 10,001 writes, three times as slow to save as the .npz built whole.
    small = {f"p{i}": np.full(100, float(i)) for i in range(300)}
    large = np.arange(1 << 16, dtype=np.float64)  # 512 KiB
    files, _ = adapters.encode_state({"opt": small, "params": {"w": large}})
    assert len(files["opt.npz"]) == 1
    views = [part for part in files["params.npz"] if isinstance(part, memoryview)]
    assert len(views) == 1 and np.shares_memory(np.frombuffer(views[0], np.float64), large)
