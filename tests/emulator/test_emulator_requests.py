"""Bad requests: each is a Google JSON error that names the field; generated bodies never 5xx."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfp_spot.emulator import Emulator
from tests.emulator.body_strategies import JOB_FIELDS, mutated_bodies

PARENT = "projects/local-project/locations/us-central1"

GOOD = {
    "displayName": "ok",
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": 1,
                "pythonPackageSpec": {
                    "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6",
                    "packageUris": ["/nonexistent/trainer-0.1.tar.gz"],
                    "pythonModule": "trainer.task",
                },
            }
        ],
        "scheduling": {"strategy": "SPOT"},
    },
}


def _pool(**changes):
    body = copy.deepcopy(GOOD)
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    for key, value in changes.items():
        if value is None:
            pool.pop(key, None)
        else:
            pool[key] = value
    return body


def _machine(**spec):
    return _pool(machineSpec={"machineType": "n1-standard-4", **spec})


def _python(**changes):
    spec = copy.deepcopy(GOOD["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"])
    spec.update(changes)
    return _pool(pythonPackageSpec=spec)


def _with(path, value):
    body = copy.deepcopy(GOOD)
    node = body
    *parents, last = path
    for key in parents:
        node = node[key]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return body


POOL0 = "job_spec.worker_pool_specs[0]"
CONTAINER = {"imageUri": "us-docker.pkg.dev/p/r/i:1"}

BAD = [
    # (case id, body, field path Vertex names (snake_case), fragment of the message)
    ("no display name", _with(["displayName"], None), "display_name", "required"),
    ("blank display name", _with(["displayName"], "  "), "display_name", "required"),
    ("long display name", _with(["displayName"], "x" * 129), "display_name", "at most 128"),
    ("no job spec", _with(["jobSpec"], None), "job_spec", "workerPoolSpecs"),
    (
        "no pools",
        _with(["jobSpec", "workerPoolSpecs"], []),
        "job_spec.worker_pool_specs",
        "at least",
    ),
    (
        "five pools",
        _with(["jobSpec", "workerPoolSpecs"], GOOD["jobSpec"]["workerPoolSpecs"] * 5),
        "job_spec.worker_pool_specs",
        "at most 4",
    ),
    ("neither spec", _pool(pythonPackageSpec=None), POOL0, "exactly one of containerSpec"),
    ("replica count 0", _pool(replicaCount=0), f"{POOL0}.replica_count", "at least 1"),
    ("primary with 2", _pool(replicaCount="2"), f"{POOL0}.replica_count", "replicaCount 1"),
    ("no machine type", _pool(machineSpec={}), f"{POOL0}.machine_spec.machine_type", "required"),
    (
        "unknown machine",
        _pool(machineSpec={"machineType": "n1-standard-3"}),
        f"{POOL0}.machine_spec.machine_type",
        "n1-standard-4",
    ),
    (
        "count without type",
        _machine(acceleratorCount=1),
        f"{POOL0}.machine_spec.accelerator_type",
        "set the accelerator type",
    ),
    (
        "type without count",
        _machine(acceleratorType="NVIDIA_TESLA_T4"),
        f"{POOL0}.machine_spec.accelerator_count",
        "at least 1",
    ),
    (
        "3 x T4",
        _machine(acceleratorType="NVIDIA_TESLA_T4", acceleratorCount=3),
        f"{POOL0}.machine_spec.accelerator_count",
        "valid counts: 1, 2, 4",
    ),
    (
        "L4 on n1",
        _machine(acceleratorType="NVIDIA_L4", acceleratorCount=1),
        f"{POOL0}.machine_spec.accelerator_type",
        "g2-*",
    ),
    (
        "a2 with wrong gpus",
        _pool(
            machineSpec={
                "machineType": "a2-highgpu-2g",
                "acceleratorType": "NVIDIA_TESLA_A100",
                "acceleratorCount": 1,
            }
        ),
        f"{POOL0}.machine_spec.accelerator_type",
        "acceleratorCount 2",
    ),
    (
        "TPU v4 pod on Spot",
        _pool(
            machineSpec={
                "machineType": "cloud-tpu",
                "acceleratorType": "TPU_V4_POD",
                "acceleratorCount": 32,
            }
        ),
        f"{POOL0}.machine_spec",
        "Spot VMs cannot be used with TPU Pods",
    ),
    (
        "v5e multi-host slice on Spot",
        _pool(
            machineSpec={
                "machineType": "ct5lp-hightpu-4t",
                "acceleratorType": "TPU_V5_LITEPOD",
                "acceleratorCount": 4,
                "tpuTopology": "4x4",
            }
        ),
        f"{POOL0}.machine_spec",
        "TPU Pods",
    ),
    (
        "unknown strategy",
        _with(["jobSpec", "scheduling"], {"strategy": 42}),
        "job_spec.scheduling.strategy",
        "SPOT (4)",
    ),
    ("101 packages", _python(packageUris=["gs://b/p.tar.gz"] * 101), "package_uris", "at most 100"),
    ("no packages", _python(packageUris=[]), "package_uris", "at least one"),
    ("bad module", _python(pythonModule="trainer/task.py"), "python_module", "trainer.task"),
    ("no executor", _python(executorImageUri=""), "executor_image_uri", "required"),
    (
        "bad env name",
        _python(env=[{"name": "1X", "value": "v"}]),
        "python_package_spec.env[0].name",
        "not a valid variable name",
    ),
    (  # ContainerSpec.env and PythonPackageSpec.env: "Maximum limit is 100."
        "101 env variables",
        _python(env=[{"name": f"V{i}", "value": "v"} for i in range(101)]),
        "python_package_spec.env",
        "at most 100",
    ),
    (
        "relative output dir",
        _with(["jobSpec", "baseOutputDirectory"], {"outputUriPrefix": "out/dir"}),
        "job_spec.base_output_directory.output_uri_prefix",
        "gs://",
    ),
    ("bad label", _with(["labels"], {"Team": "x"}), "labels.Team", "lowercase"),
    ("negative timeout", _with(["jobSpec", "scheduling", "timeout"], "-5s"), "timeout", "non-neg"),
]


@pytest.mark.parametrize(
    ("body", "field", "fragment"), [case[1:] for case in BAD], ids=[case[0] for case in BAD]
)
def test_bad_request_is_a_400_naming_the_field(emulator, api, body, field, fragment):
    status, answer = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", body)
    assert status == 400, answer
    error = answer["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    # Vertex's words: "List of found errors:\t1.Field: job_spec...; Message: ..."
    assert error["message"].startswith("List of found errors:\t1.Field: ")
    assert f"{field}" in error["message"] and fragment in error["message"]
    [violation] = error["details"][0]["fieldViolations"]
    assert violation["field"].endswith(field) and violation["description"] == error["message"]


PARSE_ERRORS = [
    # (case id, raw body, the request field the violation names, fragment of the message)
    ("not json", b"{nope", "custom_job", "Invalid JSON payload"),
    ("array", b"[]", "custom_job", "JSON object"),
    (
        "unknown field",
        json.dumps({**GOOD, "colour": "red"}).encode(),
        "custom_job",
        "Unknown name \"colour\" at 'custom_job': Cannot find field.",
    ),
    (
        "wrong type",
        json.dumps({**GOOD, "displayName": 5}).encode(),
        "custom_job.display_name",
        "Invalid value at 'custom_job.display_name' (TYPE_STRING), 5",
    ),
    (
        "unknown enum name",
        json.dumps(_with(["jobSpec", "scheduling"], {"strategy": "CHEAP"})).encode(),
        "custom_job.job_spec.scheduling.strategy",
        '(type.googleapis.com/google.cloud.aiplatform.v1.Scheduling.Strategy), "CHEAP"',
    ),
    (
        "int64 out of range",
        json.dumps(_pool(replicaCount="99999999999999999999")).encode(),
        "custom_job.job_spec.worker_pool_specs[0].replica_count",
        "(TYPE_INT64)",
    ),
    (
        "unknown field deep down",
        json.dumps(_machine(colour="red")).encode(),
        "custom_job.job_spec.worker_pool_specs[0].machine_spec",
        'Unknown name "colour"',
    ),
    (
        "Infinity as an enum",
        json.dumps(_with(["jobSpec", "scheduling"], {"strategy": float("inf")})).encode(),
        "custom_job",
        "Infinity",
    ),
    (
        "1e999 as an enum (a float infinity once decoded)",
        b'{"displayName": "x", "jobSpec": {"scheduling": {"strategy": 1e999}}}',
        "custom_job.job_spec.scheduling.strategy",
        "Invalid value",
    ),
    (
        "lone surrogate in an enum value",
        b'{"displayName": "x", "jobSpec": {"scheduling": {"strategy": "\\ud800"}}}',
        "custom_job",
        "lone surrogate",
    ),
    (
        "lone surrogate in a field name",
        b'{"displayName": "x", "\\udc00jobSpec": {}}',
        "custom_job",
        "lone surrogate",
    ),
    ("nested too deeply", b'{"labels": ' * 200 + b"{}" + b"}" * 200, "custom_job", "nested"),
    ("not UTF-8", b'{"displayName": "\xff"}', "custom_job", "Invalid JSON payload"),
    (
        "both task oneofs",
        json.dumps(_pool(containerSpec=CONTAINER))
        .encode()
        .replace(b'"containerSpec"', b'"container_spec"'),
        "custom_job.job_spec.worker_pool_specs[0]",
        "exactly one of containerSpec or pythonPackageSpec",
    ),
]


@pytest.mark.parametrize(
    ("raw", "field", "fragment"), [c[1:] for c in PARSE_ERRORS], ids=[c[0] for c in PARSE_ERRORS]
)
def test_unparseable_body_is_a_400_naming_the_request_field(emulator, api, raw, field, fragment):
    status, answer = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", raw=raw)
    assert status == 400, answer
    error = answer["error"]
    assert error["status"] == "INVALID_ARGUMENT" and fragment in error["message"], error
    [violation] = error["details"][0]["fieldViolations"]
    assert violation["field"] == field, violation


def test_every_unknown_name_is_named_as_google_names_them(emulator, api):
    """Google's JSON mapping names each unknown name, at any depth, in the body's order: one
    line of the message and one field violation each (not only the first)."""
    body = _machine(shade="red")
    body = {"colour": "red", **body, "size": 2}
    status, answer = api(
        "POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", raw=json.dumps(body).encode()
    )
    assert status == 400, answer
    machine = "custom_job.job_spec.worker_pool_specs[0].machine_spec"
    expected = [
        ("custom_job", "colour"),
        (machine, "shade"),
        ("custom_job", "size"),
    ]
    lines = [
        f"Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
        for at, name in expected
    ]
    error = answer["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == "\n".join(lines)
    assert error["details"][0]["fieldViolations"] == [
        {"field": at, "description": line} for (at, _), line in zip(expected, lines, strict=True)
    ]


@pytest.mark.parametrize(
    ("runtime", "named"),
    [
        ("none", "KFP_SPOT_CONTAINER_RUNTIME='none' names none"),
        ("nerdctl", "KFP_SPOT_CONTAINER_RUNTIME='nerdctl' names none"),
        ("/nowhere/podman", "KFP_SPOT_CONTAINER_RUNTIME='/nowhere/podman' names none"),
    ],
)
def test_container_spec_without_a_runtime_says_so(
    tmp_path, env_cache, api, monkeypatch, runtime, named
):
    """With no runtime to run it (here: the variable names none), a containerSpec job is refused
    at create, saying why and what to use instead; a pythonPackageSpec job is still accepted."""
    monkeypatch.setenv("KFP_SPOT_CONTAINER_RUNTIME", runtime)
    with Emulator(tmp_path / "state", grace_period=1.0, env_cache_dir=env_cache) as emulator:
        body = _pool(pythonPackageSpec=None, containerSpec=CONTAINER)
        status, answer = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", body)
        assert status == 400 and answer["error"]["status"] == "FAILED_PRECONDITION"
        message = answer["error"]["message"]
        assert message.startswith("jobSpec.workerPoolSpecs[0].containerSpec: running a container")
        assert named in message and "pythonPackageSpec" in message
        status, _ = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", GOOD)
        assert status == 200


def test_the_good_body_is_accepted(emulator, api):
    """The base of the table is valid, so every case above fails for its own reason."""
    status, job = api("POST", f"{emulator.endpoint}/v1/{PARENT}/customJobs", GOOD)
    assert status == 200, job
    done = emulator.wait(job["name"], timeout=60)
    assert done.state.name == "JOB_STATE_FAILED"  # its package does not exist ...
    assert "trainer-0.1.tar.gz" in done.error.message  # ... and the error says which


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
keys = st.sampled_from(JOB_FIELDS)


bodies = mutated_bodies(GOOD, keys, json_values, max_changes=3, max_depth=3)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=st.one_of(bodies, json_values))
def test_generated_bodies_never_get_a_5xx(emulator, api, body):
    url = f"{emulator.endpoint}/v1/{PARENT}/customJobs"
    status, answer = api("POST", url, raw=json.dumps(body, allow_nan=True).encode())
    assert status < 500, answer
    if status == 200:  # accepted: stop it so generated jobs do not pile up
        status, _ = api("POST", f"{emulator.endpoint}/v1/{answer['name']}:cancel", {})
        assert status in (200, 400)  # 400 when it already failed (its package does not exist)
    else:
        assert answer["error"]["code"] == status and answer["error"]["message"]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    filter_text=st.text(max_size=40)
    | st.lists(
        st.sampled_from(
            [
                "state",
                "display_name",
                "labels.a",
                "create_time",
                "=",
                "!=",
                ":",
                "<",
                "AND",
                "OR",
                "NOT",
                "(",
                ")",
                '"x"',
                "JOB_STATE_RUNNING",
                "2026-01-01T00:00:00Z",
                "*",
            ]
        ),
        max_size=8,
    ).map(" ".join),
    page_token=st.text(max_size=12),
    page_size=st.integers(-5, 2000),
)
def test_generated_list_queries_never_get_a_5xx(emulator, api, filter_text, page_token, page_size):
    from urllib.parse import urlencode

    query = urlencode({"filter": filter_text, "pageToken": page_token, "pageSize": page_size})
    status, answer = api("GET", f"{emulator.endpoint}/v1/{PARENT}/customJobs?{query}")
    assert status in (200, 400), answer
