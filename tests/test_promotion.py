"""promote_model's runtime: inputs checked before anything is copied; a record of the evidence."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kfp_spot.promotion import RECORD_NAME, PromotionInputError, component_entry, promote


@pytest.fixture
def model_dir(tmp_path):
    model = tmp_path / "job" / "model"
    (model / "sub").mkdir(parents=True)
    (model / "model.json").write_text('{"w": 1}')
    (model / "sub" / "vocab.txt").write_text("a\nb\n")
    return model


def test_promote_copies_the_model_and_records_the_evidence(model_dir, tmp_path):
    target = tmp_path / "promoted"
    assert promote(str(model_dir), str(target), {"accuracy": 0.93, "step": 40}) == str(target)
    assert (target / "model.json").read_text() == '{"w": 1}'
    assert (target / "sub" / "vocab.txt").read_text() == "a\nb\n"
    record = json.loads((target / RECORD_NAME).read_text())
    assert record["source"] == str(model_dir)
    assert record["evidence"] == {"accuracy": 0.93, "step": 40}


@pytest.mark.parametrize(
    ("case", "field", "needle"),
    [
        ("missing model", "model", "is missing or empty; expected the training job's model"),
        ("empty model", "model", "is missing or empty"),
        ("no model uri", "model", "has no URI; expected a gs:// URI or a local path"),
        ("s3 model", "model", "is not a gs:// URI or a local path"),
        ("no destination", "promoted_model", "has no URI"),
        ("inside the model", "promoted_model", "overlaps the model directory"),
        ("the model's parent", "promoted_model", "overlaps the model directory"),
        ("metrics not a dict", "metrics", "expected metrics metadata"),
    ],
)
def test_bad_inputs_are_named_and_nothing_is_written(model_dir, tmp_path, case, field, needle):
    model, target, evidence = str(model_dir), str(tmp_path / "promoted"), {"accuracy": 0.9}
    if case == "missing model":
        model = str(tmp_path / "nope")
    elif case == "empty model":
        model = str(tmp_path / "empty")
        (tmp_path / "empty").mkdir()
    elif case == "no model uri":
        model = ""
    elif case == "s3 model":
        model = "s3://bucket/model"
    elif case == "no destination":
        target = ""
    elif case == "inside the model":
        target = str(model_dir / "promoted")
    elif case == "the model's parent":
        target = str(model_dir.parent)
    else:
        evidence = ["accuracy", 0.9]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(PromotionInputError) as info:
        promote(model, target, evidence)
    assert info.value.field == field
    assert str(info.value).startswith(f"promote_model input {field!r}: ")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_model_that_is_a_file_is_named_and_nothing_is_written(tmp_path):
    model = tmp_path / "model.joblib"
    model.write_bytes(b"weights")
    with pytest.raises(PromotionInputError) as info:
        promote(str(model), str(tmp_path / "promoted"), {"accuracy": 0.9})
    assert info.value.field == "model"
    assert "is a file; expected the training job's model directory" in str(info.value)
    assert not (tmp_path / "promoted").exists()


def test_a_link_to_a_directory_in_the_model_is_copied_through(model_dir, tmp_path):
    assets = tmp_path / "assets"
    (assets / "inner").mkdir(parents=True)
    (assets / "inner" / "weights.bin").write_bytes(b"w")
    (model_dir / "assets").symlink_to(assets)
    target = tmp_path / "promoted"
    promote(str(model_dir), str(target), {"accuracy": 0.9})
    assert (target / "assets" / "inner" / "weights.bin").read_bytes() == b"w"
    assert (target / "sub" / "vocab.txt").read_text() == "a\nb\n"
    assert not (target / "assets").is_symlink()


def test_a_link_loop_in_the_model_is_named_and_nothing_is_written(model_dir, tmp_path):
    (model_dir / "sub" / "back").symlink_to(model_dir)
    with pytest.raises(PromotionInputError) as info:
        promote(str(model_dir), str(tmp_path / "promoted"), {"accuracy": 0.9})
    assert info.value.field == "model"
    assert "a link back to" in str(info.value) and "back" in str(info.value)
    assert not (tmp_path / "promoted").exists()


def test_a_metric_named_source_leaves_the_model_uri_in_the_metadata(model_dir, tmp_path, caplog):
    metrics = SimpleNamespace(metadata={"source": 0.5, "metric_source": 1.0, "accuracy": 0.9})
    promoted = SimpleNamespace(uri=str(tmp_path / "promoted"), metadata={})
    component_entry(SimpleNamespace(uri=str(model_dir)), metrics, promoted)
    assert promoted.metadata == {
        "source": str(model_dir),
        "metric_source": 1.0,
        "metric_metric_source": 0.5,
        "accuracy": 0.9,
    }
    assert "published as 'metric_metric_source'" in caplog.text
    record = json.loads((tmp_path / "promoted" / RECORD_NAME).read_text())
    assert record["source"] == str(model_dir) and record["evidence"]["source"] == 0.5


def test_the_record_is_strict_json_when_a_metric_is_not_finite(model_dir, tmp_path):
    # NaN and Infinity were written as bare tokens, which JSON outside Python refuses.
    target = tmp_path / "promoted"
    evidence = {"auc": float("nan"), "loss": float("inf"), "per_class": {"a": float("-inf")}}
    promote(str(model_dir), str(target), evidence)

    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    record = json.loads((target / RECORD_NAME).read_text(), parse_constant=refuse)
    assert record["evidence"] == {"auc": "nan", "loss": "inf", "per_class": {"a": "-inf"}}
