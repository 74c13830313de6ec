from __future__ import annotations

import pytest
from google.protobuf import json_format
from google_cloud_pipeline_components.proto.gcp_resources_pb2 import GcpResources

from kfp_spot.jobs import gcp_resources
from kfp_spot.vertex.client import make_job_client, resolve_endpoint
from kfp_spot.vertex.values import InvalidFieldError

NAME = "projects/local-project/locations/us-central1/customJobs/123"


def test_vertex_endpoint_is_regional():
    endpoint = resolve_endpoint("europe-west4")
    assert endpoint.api_endpoint == "europe-west4-aiplatform.googleapis.com"
    assert (
        endpoint.resource_uri(NAME) == f"https://europe-west4-aiplatform.googleapis.com/v1/{NAME}"
    )
    assert not endpoint.local


def test_emulator_endpoint_uses_rest_and_anonymous_credentials():
    endpoint = resolve_endpoint("us-central1", "http://127.0.0.1:8123/")
    assert endpoint.local and endpoint.base_url == "http://127.0.0.1:8123"
    client = make_job_client(endpoint)
    assert client.transport.kind == "rest"


@pytest.mark.parametrize("bad", ["ftp://x", "http://127.0.0.1:1/v1", "a/b"])
def test_bad_endpoints_are_named(bad):
    with pytest.raises(InvalidFieldError, match="api_endpoint"):
        resolve_endpoint("us-central1", bad)


def _gcpc_file(uris) -> str:
    """What GCPC's launchers write (GcpResources through json_format.MessageToJson)."""
    resources = GcpResources()
    for uri in uris:
        resource = resources.resources.add()
        resource.resource_type = "CustomJob"
        resource.resource_uri = uri
    return json_format.MessageToJson(resources)


def test_one_job_is_written_byte_for_byte_as_gcpc_writes_it(tmp_path):
    path = str(tmp_path / "out" / "gcp_resources")
    uri = resolve_endpoint("us-central1").resource_uri(NAME)
    gcp_resources.write(path, [uri])
    with open(path) as handle:
        assert handle.read() == _gcpc_file([uri])
    assert gcp_resources.read_job_names(path) == [NAME]


def test_every_job_of_a_launch_is_listed_oldest_first(tmp_path):
    names = [f"projects/local-project/locations/europe-west4/customJobs/{i}" for i in (7, 3, 9)]
    endpoint = resolve_endpoint("europe-west4")
    path = str(tmp_path / "gcp_resources")
    gcp_resources.write(path, [endpoint.resource_uri(n) for n in names])
    with open(path) as handle:
        parsed = json_format.Parse(handle.read(), GcpResources())  # GCPC's own parser
    assert [(r.resource_type, r.resource_uri) for r in parsed.resources] == [
        ("CustomJob", f"https://europe-west4-aiplatform.googleapis.com/v1/{n}") for n in names
    ]
    assert gcp_resources.read_job_names(path) == names


def test_gcpc_written_file_reads_back(tmp_path):
    path = tmp_path / "gcp_resources"
    path.write_text(_gcpc_file([f"https://us-central1-aiplatform.googleapis.com/v1/{NAME}"]))
    assert gcp_resources.read_job_names(str(path)) == [NAME]


def test_one_string_is_not_taken_for_a_list_of_uris(tmp_path):
    with pytest.raises(TypeError):
        gcp_resources.write(str(tmp_path / "g"), f"https://x/v1/{NAME}")


def test_missing_or_empty_means_no_job(tmp_path):
    assert gcp_resources.read_job_names(str(tmp_path / "none")) == []
    (tmp_path / "empty").write_text("")
    assert gcp_resources.read_job_names(str(tmp_path / "empty")) == []


@pytest.mark.parametrize(
    "text",
    [
        '{"resources": []}',
        "not json",
        '{"resources": [{"resourceType": "BatchPredictionJob", "resourceUri": "x"}]}',
        '{"resources": ["projects/local-project/locations/l/customJobs/1"]}',
        '{"resources": [{"resourceType": "CustomJob", "resourceUri": "https://x/v1/jobs/1"}]}',
    ],
)
def test_foreign_content_is_an_error(tmp_path, text):
    (tmp_path / "g").write_text(text)
    with pytest.raises(gcp_resources.GcpResourcesError):
        gcp_resources.read_job_names(str(tmp_path / "g"))


def test_the_runtime_never_imports_kfp():
    """kfp_spot.jobs is runtime code: importing the component's entry pulls in no kfp module."""
    import subprocess
    import sys

    code = (
        "import sys, kfp_spot.jobs.entry, kfp_spot.jobs.launcher;"
        "print(sorted(m for m in sys.modules if m == 'kfp' or m.startswith('kfp.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
