"""`kfp-spot endpoint list|describe|predict` against the emulator through the GAPIC clients."""

import json

import joblib
from click.testing import CliRunner

from kfp_spot.cli import main
from tests.serving.conftest import X


def test_list_describe_and_predict_a_spot_endpoint(serving, sklearn_model_dir):
    endpoint = serving.endpoint()
    dm_id = serving.deploy(serving.upload(sklearn_model_dir), endpoint, replicas=1)
    api = ["--api-endpoint", serving.emu.endpoint]
    runner = CliRunner()

    listed = runner.invoke(main, ["endpoint", "list", "--project", "local-project", *api])
    assert listed.exit_code == 0, listed.output
    assert listed.output.strip() == f"{endpoint}\t{dm_id} (SPOT 1xn1-standard-4, 100%)\te"

    described = runner.invoke(main, ["endpoint", "describe", endpoint, *api])
    assert described.exit_code == 0, described.output
    assert json.loads(described.output)["deployedModels"][0]["dedicatedResources"]["spot"]

    rows = X[:4].tolist()
    predicted = runner.invoke(main, ["endpoint", "predict", endpoint, *api], input=json.dumps(rows))
    assert predicted.exit_code == 0, predicted.output
    answer = json.loads(predicted.output)
    expected = joblib.load(sklearn_model_dir / "model.joblib").predict(X[:4]).tolist()
    assert [int(p) for p in answer["predictions"]] == expected
    assert answer["deployedModelId"] == dm_id


def test_errors_are_one_line(serving):
    runner = CliRunner()
    bad = runner.invoke(main, ["endpoint", "predict", "not-a-name", "--instances", "[[1]]"])
    assert bad.exit_code == 2 and "is not projects/PROJECT" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    missing = runner.invoke(
        main,
        [
            "endpoint",
            "predict",
            "projects/local-project/locations/us-central1/endpoints/42",
            "--instances",
            "[[1]]",
            "--api-endpoint",
            serving.emu.endpoint,
        ],
    )
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.output
    # The endpoint, not the request URL with its query string.
    assert "projects/local-project/locations/us-central1/endpoints/42" in missing.output
    assert "http" not in missing.output and "?" not in missing.output
    assert len(missing.output.strip().splitlines()) == 1
    not_json = runner.invoke(
        main,
        [
            "endpoint",
            "predict",
            "projects/local-project/locations/l/endpoints/1",
            "--instances",
            "{",
        ],
    )
    assert not_json.exit_code == 2 and "not JSON" in not_json.output


def test_a_misspelt_key_of_the_request_is_named_not_dropped():
    # {"instances": ..., "paramters": ...} was sent without its parameters, without a word.
    result = CliRunner().invoke(
        main,
        [
            "endpoint",
            "predict",
            "projects/local-project/locations/us-central1/endpoints/1",
            "--instances",
            '{"instances": [[1]], "paramters": {"k": 1}}',
            "--api-endpoint",
            "http://127.0.0.1:9",  # never reached
        ],
    )
    assert result.exit_code == 2
    assert "unknown key 'paramters'" in result.output and "--instances" in result.output
    assert len(result.output.strip().splitlines()) == 1
