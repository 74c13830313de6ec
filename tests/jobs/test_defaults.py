"""launch_spot_job's input defaults have one source: the runtime dataclasses.

The component's signature must spell them as literals (KFP embeds the function's source in the
YAML and evaluates it without kfp_spot), so these tests fail on any drift between the runtime,
the signature, the committed component YAML and the pipelines that forward an input unchanged.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from kfp_spot.components.launch_spot_job import component as launch_component
from kfp_spot.jobs.entry import INPUT_DEFAULTS, build_request, input_defaults
from kfp_spot.jobs.inputs import JobInputs
from kfp_spot.jobs.recovery import RecoveryPolicy
from kfp_spot.pipelines import catalog

ROOT = Path(__file__).resolve().parents[2]
COMPONENT_YAML = ROOT / "components" / "launch_spot_job" / "component.yaml"
# Artifacts (default None: optional connection) and outputs.
NOT_PARAMETERS = {"package", "resume_from", "checkpoint", "model", "job_report"}


def _signature_defaults() -> dict[str, object]:
    python_func = launch_component.launch_spot_job.python_func
    return {
        name: p.default
        for name, p in inspect.signature(python_func).parameters.items()
        if p.default is not inspect.Parameter.empty and name not in NOT_PARAMETERS
    }


def _yaml_parameters(path: Path) -> dict[str, dict]:
    return yaml.safe_load(path.read_text())["root"]["inputDefinitions"]["parameters"]


def test_the_signature_repeats_the_runtime_defaults_exactly():
    signature = _signature_defaults()
    assert signature == INPUT_DEFAULTS
    for name, value in signature.items():  # == says 0 == 0.0 == False; the types must agree too
        assert type(value) is type(INPUT_DEFAULTS[name]), name


def test_the_compiled_component_carries_the_runtime_defaults():
    parameters = _yaml_parameters(COMPONENT_YAML)
    compiled = {n: p["defaultValue"] for n, p in parameters.items() if "defaultValue" in p}
    assert compiled == input_defaults()
    optional_without_default = {
        n for n, p in parameters.items() if p.get("isOptional") and "defaultValue" not in p
    }
    assert optional_without_default == set()


def _launch_tasks(node: object):
    """Every task of a compiled pipeline that runs the launch_spot_job component."""
    if isinstance(node, dict):
        ref = node.get("componentRef", {}).get("name", "")
        if ref.startswith("comp-launch-spot-job"):
            yield node
        for value in node.values():
            yield from _launch_tasks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _launch_tasks(value)


def test_pipelines_that_forward_an_input_keep_its_default():
    checked = {}
    for entry in catalog.PIPELINES:
        spec = yaml.safe_load(entry.default_path().read_text())
        pipeline_params = spec["root"]["inputDefinitions"]["parameters"]
        for task in _launch_tasks(spec):
            for name, source in task["inputs"].get("parameters", {}).items():
                forwarded = source.get("componentInputParameter")
                if forwarded is None or "defaultValue" not in pipeline_params.get(forwarded, {}):
                    continue
                assert pipeline_params[forwarded]["defaultValue"] == INPUT_DEFAULTS[name], (
                    f"{entry.name}: pipeline parameter {forwarded} (launch input {name})"
                )
                checked.setdefault(entry.name, []).append(name)
    assert {"spot_training", "continue_training"} <= set(checked)
    assert "machine_type" in checked["spot_training"]


def test_build_request_falls_back_to_the_same_defaults(tmp_path):
    from artifacts import FakeArtifact

    request = build_request(
        project="test-proj",
        location="europe-west4",
        container_image_uri="us-docker.pkg.dev/p/r/i:1",
        checkpoint=FakeArtifact(uri=str(tmp_path / "checkpoint")),
        gcp_resources=str(tmp_path / "gcp_resources"),
        timeout=None,  # None and "" mean "not given" (KFP and the CLI send both)
        machine_type="",
        persistent_resource_id=None,
    )
    expected = JobInputs(
        project="test-proj",
        location="europe-west4",
        container_image_uri="us-docker.pkg.dev/p/r/i:1",
        base_output_directory=request.inputs.base_output_directory,
        persistent_resource_id="",  # the placeholder, settled as Vertex does without one
    )
    got = request.inputs
    for name in JobInputs.__dataclass_fields__:
        want = getattr(expected, name)
        have = getattr(got, name)
        if isinstance(want, tuple):
            have = tuple(have)
        assert have == want, name
    assert request.policy == RecoveryPolicy()
    assert request.api_endpoint == INPUT_DEFAULTS["api_endpoint"]
    assert request.poll_interval_seconds == INPUT_DEFAULTS["poll_interval_seconds"]


def test_every_optional_parameter_has_a_runtime_default():
    python_func = launch_component.launch_spot_job.python_func
    parameters = set(inspect.signature(python_func).parameters) - NOT_PARAMETERS - {"gcp_resources"}
    assert parameters == set(INPUT_DEFAULTS)
