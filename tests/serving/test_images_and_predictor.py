"""Prebuilt prediction images and the artifact layouts their servers load."""

import datetime
import io

import pytest

from kfp_spot import executors
from kfp_spot.emulator.serving import predictor

_REVIEWED = executors.table_reviewed(executors.PREDICTION_TABLE)


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


def test_the_end_of_availability_of_a_prediction_image_is_announced_before_and_after_it():
    # The documented dates of Google's list (kfp_spot/data/prediction_images.csv).
    uri = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-5:latest"
    image = executors.prediction_image(uri)
    eoa = image.end_of_availability
    assert image.profile.end_of_availability == eoa  # the serving environment's log says it too
    notice = executors.prediction_image_notice
    assert notice(uri, eoa - datetime.timedelta(days=executors.EXPIRY_NOTICE_DAYS + 1)) is None
    assert f"reaches its documented end of availability on {eoa} (10 days)" in notice(
        uri, eoa - datetime.timedelta(days=10)
    )
    after = notice(uri, eoa + datetime.timedelta(days=1))
    assert (
        f"prediction image sklearn-cpu.1-5 reached its documented end of availability on {eoa}"
        in after
    )
    assert "creates no new endpoint" in after and "predictions/pre-built-containers" in after
    assert notice("us-central1-docker.pkg.dev/p/repo/server:1") is None  # own container
    assert notice("europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest") is None


def test_an_expired_prediction_image_is_announced_on_the_console_once():
    expired = [i for i in executors.PREDICTION_IMAGES.values() if i.end_of_availability < _REVIEWED]
    assert expired  # Google's list holds versions it no longer serves
    err = io.StringIO()
    notice = executors.warn_prediction_image(expired[0].uri, stream=err)
    assert notice and err.getvalue() == f"kfp-spot: warning: {notice}\n"
    executors.warn_prediction_image(expired[0].uri, stream=err)
    assert err.getvalue().count("kfp-spot: warning:") == 1


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
