"""The project of a resource name, as Vertex AI judges it: a malformed one is a 403 on every route.

Vertex AI answers a project that is neither a project ID nor a project number with 403
PERMISSION_DENIED ("Permission '...' denied on resource '...' (or it may not exist).") before it
reads the request's body; the emulator must not be more lenient. Checked through the real GAPIC
clients (REST transport), over raw HTTP, and on the route table itself for generated names.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.types import CustomJob, Endpoint, Model
from google.longrunning import operations_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_spot.emulator import routes
from kfp_spot.emulator.errors import ApiError
from kfp_spot.emulator.routing import RouteGroup, RouteTable
from kfp_spot.emulator.serving import routes as serving_routes
from tests.vertex.strategies import PROJECT_ID_CHARS, project_ids

REGION = "us-central1"
# One of each way a project string fails: uppercase, underscore, too short (5), too long (31
# and 200), non-ASCII, a trailing hyphen, a digit first, a number with a leading zero.
MALFORMED = [
    "P_UP",
    "My-project",
    "my_project",
    "abcde",
    "p",
    "a" * 31,
    "a" * 200,
    "ü-project",
    "projekt-ü",
    "my-project-",
    "1st-project",
    "0123",
]
# A project ID (6 and 30 characters), a domain-scoped ID and a project number.
WELL_FORMED = ["local-project", "abcdef", "a" + "1" * 29, "example.com:my-proj", "123456789012"]


def _denied(permission: str, resource: str) -> str:
    return (
        f"Permission '{permission}' denied on resource '//aiplatform.googleapis.com/{resource}' "
        "(or it may not exist)."
    )


def _client(cls, emulator):
    return cls(
        transport="rest",
        client_options=ClientOptions(api_endpoint=emulator.endpoint),
        credentials=AnonymousCredentials(),
    )


@pytest.fixture
def clients(emulator):
    return (
        _client(aiplatform_v1.JobServiceClient, emulator),
        _client(aiplatform_v1.EndpointServiceClient, emulator),
        _client(aiplatform_v1.ModelServiceClient, emulator),
    )


@pytest.mark.parametrize("project", MALFORMED)
def test_a_malformed_project_is_denied_on_every_gapic_method_before_the_body_is_read(
    clients, project
):
    jobs, endpoints, models = clients
    parent = f"projects/{project}/locations/{REGION}"
    job, endpoint, model = f"{parent}/customJobs/1", f"{parent}/endpoints/1", f"{parent}/models/1"
    operation = operations_pb2.GetOperationRequest(name=f"{parent}/operations/1")
    calls = [
        # an empty CustomJob, Endpoint and Model: each would be a 400 under a valid project
        (
            lambda: jobs.create_custom_job(parent=parent, custom_job=CustomJob()),
            "customJobs.create",
            parent,
        ),
        (lambda: list(jobs.list_custom_jobs(parent=parent)), "customJobs.list", parent),
        (lambda: jobs.get_custom_job(name=job), "customJobs.get", job),
        (lambda: jobs.cancel_custom_job(name=job), "customJobs.cancel", job),
        (lambda: jobs.delete_custom_job(name=job), "customJobs.delete", job),
        (lambda: jobs.get_operation(operation), "customJobs.get", operation.name),
        (
            lambda: endpoints.create_endpoint(parent=parent, endpoint=Endpoint()),
            "endpoints.create",
            parent,
        ),
        (lambda: list(endpoints.list_endpoints(parent=parent)), "endpoints.list", parent),
        (lambda: endpoints.get_endpoint(name=endpoint), "endpoints.get", endpoint),
        (
            lambda: endpoints.undeploy_model(endpoint=endpoint, deployed_model_id="1"),
            "endpoints.undeploy",
            endpoint,
        ),
        (lambda: models.upload_model(parent=parent, model=Model()), "models.upload", parent),
        (lambda: models.get_model(name=model), "models.get", model),
    ]
    for call, permission, resource in calls:
        with pytest.raises(exceptions.Forbidden) as err:
            call()
        assert err.value.code == 403, permission
        # the REST transport puts the request line in front of the service's message
        said = err.value.message
        assert said.endswith(": " + _denied(f"aiplatform.{permission}", resource)), said


@pytest.mark.parametrize("project", MALFORMED)
def test_a_malformed_project_is_a_403_over_http_whatever_the_body(emulator, api, project):
    parent = f"projects/{project}/locations/{REGION}"
    for method, path, body, permission, resource in [
        ("POST", "/customJobs", b"{", "customJobs.create", ""),  # not even JSON
        ("POST", "/customJobs", b'{"displayName": 7}', "customJobs.create", ""),
        ("POST", "/endpoints", b"[]", "endpoints.create", ""),
        ("POST", "/models:upload", b'{"model": {}}', "models.upload", ""),
        ("GET", "/endpoints/1", None, "endpoints.get", "/endpoints/1"),
        ("POST", "/endpoints/1:deployModel", b"{}", "endpoints.deploy", "/endpoints/1"),
        ("POST", "/endpoints/1:predict", b"{", "endpoints.predict", "/endpoints/1"),
        ("DELETE", "/models/1", None, "models.delete", "/models/1"),
        ("GET", "/models/1/operations/2", None, "models.get", "/models/1/operations/2"),
    ]:
        url = f"{emulator.endpoint}/v1/{quote(parent + path, safe='/:')}"
        status, error = api(method, url, raw=body)
        assert status == 403 and error["error"]["status"] == "PERMISSION_DENIED", (path, error)
        assert error["error"]["message"] == _denied(f"aiplatform.{permission}", parent + resource)
        violation = error["error"]["details"][0]["fieldViolations"][0]
        assert "6-30 lowercase letters" in violation["description"], violation  # what is valid
    # the emulator's own routes refuse it too
    url = f"{emulator.endpoint}/emulator/v1/{quote(parent, safe='/:')}/spotCapacity"
    status, error = api("POST", url, {"available": False})
    assert status == 403 and error["error"]["status"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("project", WELL_FORMED)
def test_a_project_id_a_domain_scoped_id_and_a_number_are_accepted(clients, api, emulator, project):
    jobs, endpoints, models = clients
    parent = f"projects/{project}/locations/{REGION}"
    assert list(jobs.list_custom_jobs(parent=parent)) == []
    assert list(endpoints.list_endpoints(parent=parent)) == []
    assert list(models.list_models(parent=parent)) == []
    with pytest.raises(exceptions.NotFound):
        endpoints.get_endpoint(name=f"{parent}/endpoints/1")
    # past the project: the body is judged (an empty CustomJob is a 400, not a 403)
    with pytest.raises(exceptions.BadRequest):
        jobs.create_custom_job(parent=parent, custom_job=CustomJob())
    status, _ = api("GET", f"{emulator.endpoint}/v1/{parent}/customJobs")
    assert status == 200
    # the same name with an uppercase letter in front names no project
    status, error = api(
        "GET", f"{emulator.endpoint}/v1/projects/X{project}/locations/{REGION}/customJobs"
    )
    assert status == 403, error


def test_an_unknown_location_is_a_400_on_the_serving_routes_as_on_custom_jobs(
    clients, api, emulator
):
    jobs, endpoints, models = clients
    parent = "projects/local-project/locations/mars"
    for call, field in [
        (lambda: list(jobs.list_custom_jobs(parent=parent)), "parent"),
        (lambda: jobs.get_custom_job(name=f"{parent}/customJobs/1"), "name"),
        (lambda: endpoints.get_endpoint(name=f"{parent}/endpoints/1"), "name"),
        (lambda: list(endpoints.list_endpoints(parent=parent)), "parent"),
        (
            lambda: endpoints.create_endpoint(parent=parent, endpoint=Endpoint(display_name="e")),
            "parent",
        ),
        (lambda: models.get_model(name=f"{parent}/models/1"), "name"),
        (lambda: list(models.list_models(parent=parent)), "parent"),
    ]:
        with pytest.raises(exceptions.BadRequest) as err:
            call()
        assert f": {field}: location 'mars' is not a Vertex AI region" in err.value.message
    status, error = api("GET", f"{emulator.endpoint}/v1/{parent}/endpoints/1")
    assert status == 400 and error["error"]["status"] == "INVALID_ARGUMENT"
    assert error["error"]["details"][0]["fieldViolations"][0]["field"] == "name"
    # the project is judged first: a malformed project in an unknown location is a 403
    status, error = api("GET", f"{emulator.endpoint}/v1/projects/P_UP/locations/mars/endpoints/1")
    assert status == 403


# Generated names, on the route table (no server): the rule, drawn from its parts.
project_numbers = st.integers(1, 2**63 - 1).map(str)  # an int64
malformed_projects = st.one_of(
    project_ids.map(lambda p: p[:-1] + "-"),  # ends with a hyphen
    st.integers(2**63, 10**25).map(str),  # a number no int64 holds
    project_ids.map(lambda p: p.upper()),  # uppercase
    # an underscore; too short (or a number with a leading zero); too long; non-ASCII
    st.tuples(project_ids, st.integers(1, 5)).map(lambda t: t[0][: t[1]] + "_" + t[0][t[1] :]),
    st.text(PROJECT_ID_CHARS, min_size=1, max_size=5).filter(
        lambda p: not p.isdigit() or p[0] == "0"
    ),
    st.tuples(project_ids, st.integers(31, 200)).map(lambda t: (t[0] + "a" * 200)[: t[1]]),
    st.tuples(project_ids, st.characters(min_codepoint=0x80, exclude_categories=("Cs",))).map(
        lambda t: t[0][:3] + t[1] + t[0][3:]
    ),
)


def _table() -> RouteTable:
    return RouteTable(
        RouteGroup("jobs", routes.ROUTES, routes.SERVED),
        RouteGroup("serving", serving_routes.ROUTES, serving_routes.SERVED),
    )


TABLE = _table()


well_formed_projects = st.one_of(
    project_ids, project_numbers, project_ids.map("example.com:".__add__)
)


@given(bad=malformed_projects, good=well_formed_projects)
@settings(max_examples=300, deadline=None)
def test_the_dispatcher_denies_any_malformed_project_and_passes_any_well_formed_one(bad, good):
    for method, path in [
        ("POST", "/v1/{}/customJobs"),
        ("GET", "/v1/{}/endpoints/7"),
        ("POST", "/v1beta1/{}/models:upload"),
        ("GET", "/ui/{}/operations/1"),
    ]:
        with pytest.raises(ApiError) as err:
            TABLE.match(method, path.format(f"projects/{bad}/locations/{REGION}"))
        assert err.value.status == "PERMISSION_DENIED" and err.value.http_status == 403
        assert "(or it may not exist)." in err.value.message
        parent = f"projects/{good}/locations/{REGION}"
        found = TABLE.match(method, path.format(parent))
        assert next(iter(found.params.values())).startswith(parent)
