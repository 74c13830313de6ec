"""`kfp-spot run --regions`: the option's values, and a local run that fails over (end to end)."""

from __future__ import annotations

import json

import pytest

from kfp_spot.accounting import region_of_job
from kfp_spot.pipelines import local, local_run
from kfp_spot.pipelines.local_regions import RegionsError, parse_regions


def test_regions_are_read_in_order():
    assert parse_regions("us-central1, europe-west4") == ["us-central1", "europe-west4"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("us-central1,europe-wst4", "did you mean 'europe-west4'"),
        ("us-central1,us-central1", "names us-central1 more than once"),
        (",", "names no region"),
    ],
)
def test_a_bad_region_list_says_what_is_valid(text, needle):
    with pytest.raises(RegionsError, match=needle):
        parse_regions(text)


def test_a_bad_region_is_refused_before_the_run_starts(tmp_path):
    with pytest.raises(local.LocalRunError, match=r"^regions: 'mars-north1' is not a Vertex AI"):
        local_run.run_local(tmp_path / "run", regions=["mars-north1"], progress=None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("vertex", [[], ["--vertex", "--project", "my-proj", "--dry-run"]])
def test_regions_given_both_as_option_and_param_is_refused_not_one_dropped(tmp_path, vertex):
    # --regions silently replaced --param regions=[...] (locally and in the submitted request).
    from click.testing import CliRunner

    from kfp_spot.cli import main

    args = ["run", *vertex, "--regions", "us-central1", "--param", 'regions=["asia-east1"]']
    if not vertex:
        args += ["--run-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "--regions and --param regions=... both set the pipeline's regions" in result.output
    assert not (tmp_path / "run").exists()


def test_a_run_fails_over_to_the_next_region_and_resumes_from_its_checkpoint(tmp_path):
    result = local_run.run_local(
        tmp_path / "run",
        preemptions=1,
        grace_period=5.0,
        regions=["us-central1", "europe-west4"],
        progress=None,
    )
    text = local.summarize(result)
    assert result.succeeded, text
    assert "failover:           us-central1 → europe-west4 at step " in text
    last = result.job_names[-1]
    assert region_of_job(last) == "europe-west4"
    assert region_of_job(result.job_names[0]) == "us-central1"
    [failover] = result.region_summary.failovers
    assert failover.step is not None and failover.step > 0
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["job_regions"][last] == "europe-west4"
    assert doc["regions"] == ["us-central1", "europe-west4"]
    assert "## Regions" in (tmp_path / "run" / "report.md").read_text()
    [job_report] = (tmp_path / "run" / "pipeline_root").glob("*/launch-spot-job/job_report")
    metrics = json.loads(job_report.read_text())["metrics"]
    assert metrics["regions_used"] == 2 and metrics["failovers"] == 1


def test_a_regions_parameter_that_is_not_names_is_refused_before_the_run(tmp_path):
    # --param regions=[1,2]: the launch component would refuse it (naming the input) once the run
    # reached it; the run checks its launch first and refuses it before anything starts.
    with pytest.raises(local.LocalRunError) as info:
        local_run.run_local(
            tmp_path / "run", parameters={"regions": [1, 2]}, preemptions=0, progress=None
        )
    assert str(info.value).startswith(
        "task 'launch-spot-job': launch_spot_job input 'regions': expected a list of strings"
    )
    assert not (tmp_path / "run").exists()


def _pipeline_with_regions():
    """A pipeline with a ``regions`` parameter and one light task (no launch)."""
    from kfp import dsl

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def here():
        print("no launch here")

    def regions_only(regions=["us-central1"], api_endpoint=""):  # noqa: B006 (a KFP default)
        here()

    # Real annotations: this module's are strings, which KFP does not read as types.
    regions_only.__annotations__ = {"regions": list, "api_endpoint": str}
    return dsl.pipeline(name="regions-only")(regions_only)


@pytest.mark.parametrize(
    ("regions", "said"),
    [
        (["us-central1", "europe-west4"], True),
        (["us-central1"], False),
    ],
)
def test_regions_to_fail_over_to_without_preemptions_say_that_nothing_will(tmp_path, regions, said):
    events: list[str] = []
    result = local.run(
        _pipeline_with_regions(),
        regions=regions,
        preemptions=0,
        run_dir=tmp_path / "run",
        progress=events.append,
    )
    assert result.succeeded, events
    notes = [e for e in events if "with no preemptions" in e]
    expected = (
        "note: regions us-central1, europe-west4 with no preemptions: the drill never takes "
        "us-central1's Spot capacity away, so the launch stays in us-central1; give 1 or more "
        "preemptions to see it fail over to europe-west4"
    )
    assert [n.split("] ", 1)[-1] for n in notes] == ([expected] if said else [])
