"""Prebuilt prediction images and the artifact layouts their servers load."""

import pytest

from kfp_spot import executors
from kfp_spot.emulator.serving import predictor


@pytest.mark.parametrize(
    ("uri", "framework", "served"),
    [
        ("us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest", "sklearn", True),
        ("asia-docker.pkg.dev/vertex-ai/prediction/xgboost-cpu.2-1:latest", "xgboost", True),
        ("europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest", "tf2", False),
        ("us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6", "sklearn", True),  # :latest
    ],
)
def test_prebuilt_images_are_recognised(uri, framework, served):
    image = executors.prediction_image(uri)
    assert image is not None and image.framework == framework and image.served_locally is served


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:1.0", "tag 'latest' only"),
        ("us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.2-9:latest", "sklearn-cpu.1-6"),
        ("us-docker.pkg.dev/vertex-ai/prediction/notaframework:latest", "not a prebuilt"),
    ],
)
def test_images_vertex_does_not_offer_are_refused(uri, says):
    with pytest.raises(executors.PredictionImageError, match=says):
        executors.prediction_image(uri)


def test_custom_containers_are_not_prebuilt():
    assert executors.prediction_image("us-central1-docker.pkg.dev/p/repo/server:1") is None
    assert executors.prediction_image("") is None


@pytest.mark.parametrize(
    ("files", "framework", "found"),
    [
        (["model.joblib"], "sklearn", "model.joblib"),
        (["model.pkl", "notes.txt"], "sklearn", "model.pkl"),
        (["model.bst"], "xgboost", "model.bst"),
        (["model.bst", "model.pkl"], "xgboost", None),  # two candidates: ambiguous
        (["model.bst"], "sklearn", None),  # the sklearn image does not load Boosters
        (["model.npz"], "sklearn", None),
    ],
)
def test_exactly_one_loadable_file(tmp_path, files, framework, found):
    for name in files:
        (tmp_path / name).write_bytes(b"x")
    if found is None:
        with pytest.raises(predictor.ModelLoadError, match="exactly one of"):
            predictor.find_artifact(str(tmp_path), framework)
    else:
        assert predictor.find_artifact(str(tmp_path), framework) == str(tmp_path / found)


def test_xgboost_booster_predicts_on_a_dmatrix(tmp_path):
    xgboost = pytest.importorskip("xgboost")  # not a dependency: tested where it is installed
    import numpy as np

    X = np.random.default_rng(0).normal(size=(40, 3))
    booster = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(X, X[:, 0] > 0), 5)
    booster.save_model(str(tmp_path / "model.bst"))
    model = predictor.load_model(str(tmp_path), "xgboost")
    assert (
        predictor.predict(model, X[:2].tolist()) == booster.predict(xgboost.DMatrix(X[:2])).tolist()
    )
