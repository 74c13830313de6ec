"""CustomJob fields whose form or required parts Vertex AI documents, through the real GAPIC client.

A job the emulator accepts here would be refused by Vertex AI on its first real run: each case is
a 400 naming the field, and the well-formed value next to it is accepted.
"""

from __future__ import annotations

import json

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.types import CustomJob

PARENT = "projects/demo-project/locations/us-central1"
POOL0 = "job_spec.worker_pool_specs[0]"
_PEERING = {"domain": "corp.", "targetProject": "dns-host-1", "targetNetwork": "shared-vpc"}
_LUSTRE = {"instanceIp": "10.0.0.2", "volumeHandle": "v", "filesystem": "lfs", "mountPoint": "d"}


def _machine(body, **spec):
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = spec


def _lustre(mount):
    def edit(body):
        body["jobSpec"]["workerPoolSpecs"][0]["lustreMounts"] = [mount]

    return edit


def _spec(key, value):
    def edit(body):
        body["jobSpec"][key] = value

    return edit


def _env(value):
    def edit(body):
        spec = body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
        spec["env"] = [{"name": "OK", "value": "1"}, {"name": "CLASSES", "value": value}]

    return edit


def _partition(size):
    return lambda body: _machine(body, machineType="a2-highgpu-1g", gpuPartitionSize=size)


REFUSED = [
    # (case id, edit of a good body, the field Vertex names, fragment of the message)
    (
        "env value with an apostrophe",
        _env("['cat', 'dog']"),  # str() of a Python list
        f"{POOL0}.python_package_spec.env[1].value",
        "unescaped apostrophe",
    ),
    (  # the replica's start raised, and the job FAILED as "internal error in the emulator"
        "env value with a NUL",
        _env("a\x00b"),
        f"{POOL0}.python_package_spec.env[1].value",
        "holds a NUL character",
    ),
    (
        "argument with a NUL",
        lambda body: body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"].append(
            "\x00"
        ),
        f"{POOL0}.python_package_spec.args[2]",
        "holds a NUL character",
    ),
    (  # it reaches the replicas as AIP_MODEL_DIR, ...: "internal error in the emulator"
        "Cloud Storage output directory with a NUL",
        _spec("baseOutputDirectory", {"outputUriPrefix": "gs://my-bucket/o\x00ut"}),
        "job_spec.base_output_directory.output_uri_prefix",
        "holds a NUL character",
    ),
    (  # the replicas' start raised: "internal error in the emulator"
        "local output directory with a NUL",
        _spec("baseOutputDirectory", {"outputUriPrefix": "/tmp/o\x00ut"}),
        "job_spec.base_output_directory.output_uri_prefix",
        "holds a NUL character",
    ),
    ("partition not a size", _partition("banana"), "gpu_partition_size", "[compute]g.[memory]gb"),
    ("partition of 8 compute units", _partition("8g.80gb"), "gpu_partition_size", "'1g.10gb'"),
    (
        "lustre without instanceIp",
        _lustre({**_LUSTRE, "instanceIp": ""}),
        f"{POOL0}.lustre_mounts[0].instance_ip",
        "required",
    ),
    ("lustre mount empty", _lustre({}), f"{POOL0}.lustre_mounts[0].instance_ip", "required"),
    (
        "lustre without volumeHandle",
        _lustre({**_LUSTRE, "volumeHandle": ""}),
        f"{POOL0}.lustre_mounts[0].volume_handle",
        "required",
    ),
    (
        "lustre without filesystem",
        _lustre({**_LUSTRE, "filesystem": ""}),
        f"{POOL0}.lustre_mounts[0].filesystem",
        "required",
    ),
    (
        "lustre without mountPoint",
        _lustre({**_LUSTRE, "mountPoint": ""}),
        f"{POOL0}.lustre_mounts[0].mount_point",
        "required",
    ),
    ("model not a name", _spec("models", ["my-model"]), "job_spec.models[0]", "models/MODEL"),
    (
        "model name with a stray part",
        _spec("models", [f"{PARENT}/models/1", f"{PARENT}/models/1/versions/2"]),
        "job_spec.models[1]",
        "models/MODEL",
    ),
    (
        "network attachment of no possible form",
        _spec("pscInterfaceConfig", {"networkAttachment": "My_Attachment"}),
        "job_spec.psc_interface_config.network_attachment",
        "networkAttachments",
    ),
    (
        "network attachment named in a zone",
        _spec(
            "pscInterfaceConfig",
            {"networkAttachment": "projects/123/zones/us-central1-a/networkAttachments/na"},
        ),
        "job_spec.psc_interface_config.network_attachment",
        "networkAttachments",
    ),
    (
        "DNS peering into no project",
        _spec("pscInterfaceConfig", {"dnsPeeringConfigs": [{**_PEERING, "targetProject": "P 1"}]}),
        "job_spec.psc_interface_config.dns_peering_configs[0].target_project",
        "project ID",
    ),
    (
        "DNS peering into a network's full name",
        _spec(
            "pscInterfaceConfig",
            {"dnsPeeringConfigs": [{**_PEERING, "targetNetwork": "projects/1/global/networks/n"}]},
        ),
        "job_spec.psc_interface_config.dns_peering_configs[0].target_network",
        "not its full name",
    ),
]

ACCEPTED = [
    ("env value in JSON", _env('["cat", "dog"]')),
    ("env value with an escaped apostrophe", _env("o\\'brien")),
    ("partition of an A100", _partition("1g.5gb")),
    ("partition of 7 compute units", _partition("7g.40gb")),
    ("lustre mount whole", _lustre(_LUSTRE)),
    ("model by name", _spec("models", [f"{PARENT}/models/123"])),
    ("model versions", _spec("models", [f"{PARENT}/models/1@golden", f"{PARENT}/models/9@2"])),
    ("network attachment by name", _spec("pscInterfaceConfig", {"networkAttachment": "my-na"})),
    (
        "network attachment by full name",
        _spec(
            "pscInterfaceConfig",
            {"networkAttachment": "projects/12345/regions/us-central1/networkAttachments/my-na"},
        ),
    ),
    ("DNS peering", _spec("pscInterfaceConfig", {"dnsPeeringConfigs": [_PEERING]})),
]


def _create(gapic, body):
    return gapic.create_custom_job(parent=PARENT, custom_job=CustomJob.from_json(json.dumps(body)))


@pytest.mark.parametrize(
    ("edit", "field", "fragment"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_field_vertex_refuses_is_a_400_naming_it(gapic, make_job, edit, field, fragment):
    body = make_job("--steps", "1")
    edit(body)
    with pytest.raises(exceptions.BadRequest) as caught:
        _create(gapic, body)
    message = caught.value.message
    assert f"{field};" in message, message
    assert fragment in message, message


def _missing(sent, kept, path="jobSpec"):
    """Where ``kept`` lacks or changed a value ``sent`` has (``kept`` may hold more)."""
    if isinstance(sent, dict):
        return [m for k, v in sent.items() for m in _missing(v, (kept or {}).get(k), f"{path}.{k}")]
    if isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        return [
            m
            for i, (a, b) in enumerate(zip(sent, kept, strict=True))
            for m in _missing(a, b, f"{path}[{i}]")
        ]
    return [] if sent == kept else [f"{path}: sent {sent!r}, kept {kept!r}"]


@pytest.mark.parametrize("edit", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_the_well_formed_value_is_accepted(gapic, make_job, edit):
    body = make_job("--steps", "1", strategy="STANDARD")
    edit(body)
    created = _create(gapic, body)
    # Accepted as sent: the job read back holds the value, as Vertex AI keeps it.
    stored = gapic.get_custom_job(name=created.name)
    sent = json.loads(CustomJob.to_json(CustomJob.from_json(json.dumps(body))))["jobSpec"]
    assert _missing(sent, json.loads(CustomJob.to_json(stored))["jobSpec"]) == []
