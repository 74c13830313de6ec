"""A platform team's pipeline: our components' outputs wired into GCPC's ops (README)."""

import pytest
import yaml
from google_cloud_pipeline_components.types import artifact_types
from google_cloud_pipeline_components.v1.model import ModelUploadOp
from kfp import compiler, dsl
from kfp.dsl.types.type_utils import InconsistentTypeException

from kfp_spot.components import (
    DeploySpotEndpointOp,
    EvaluateCheckpointOp,
    LaunchSpotJobOp,
    PreparePackageOp,
    PromoteModelOp,
)

SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"


def test_the_launch_model_is_no_unmanaged_container_model():
    """What the README says: GCPC's ModelUploadOp refuses our Model artifact as it is."""
    with pytest.raises(InconsistentTypeException, match="unmanaged_container_model"):

        @dsl.pipeline
        def direct():
            train = LaunchSpotJobOp(container_image_uri="gcr.io/team/trainer:1")
            ModelUploadOp(display_name="m", unmanaged_container_model=train.outputs["model"])


def test_the_promoted_model_imported_by_its_uri_uploads_with_gcpc_and_deploys_on_spot(tmp_path):
    """The README's wiring compiles: promote's URI -> importer -> ModelUploadOp -> our deploy."""

    @dsl.pipeline(name="team-upload")
    def team(gcp_project: str, gcp_region: str = "europe-west4"):
        package = PreparePackageOp(source="gs://team-bucket/src/t.tar.gz")
        train = LaunchSpotJobOp(
            project=gcp_project, location=gcp_region, package=package.outputs["package"]
        )
        gate = EvaluateCheckpointOp(
            checkpoint=train.outputs["checkpoint"], package=package.outputs["package"]
        )
        with dsl.If(gate.outputs["Output"] == True):  # noqa: E712
            promote = PromoteModelOp(model=train.outputs["model"], metrics=gate.outputs["metrics"])
            unmanaged = dsl.importer(
                artifact_uri=promote.outputs["Output"],
                artifact_class=artifact_types.UnmanagedContainerModel,
                metadata={"containerSpec": {"imageUri": SERVING_IMAGE}},
            )
            upload = ModelUploadOp(
                project=gcp_project,
                location=gcp_region,
                display_name="my-model",
                unmanaged_container_model=unmanaged.output,
            )
            DeploySpotEndpointOp(
                project=gcp_project, location=gcp_region, uploaded_model=upload.outputs["model"]
            )

    path = tmp_path / "team.yaml"
    compiler.Compiler().compile(team, str(path))
    spec = yaml.safe_load(path.read_text())
    tasks = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    uri = tasks["importer"]["inputs"]["parameters"]["uri"]["taskOutputParameter"]
    assert uri == {"outputParameterKey": "Output", "producerTask": "promote-model"}
    upload_input = tasks["model-upload"]["inputs"]["artifacts"]["unmanaged_container_model"]
    assert upload_input["taskOutputArtifact"]["producerTask"] == "importer"
    deploy_input = tasks["deploy-spot-endpoint"]["inputs"]["artifacts"]["uploaded_model"]
    assert deploy_input["taskOutputArtifact"] == {
        "outputArtifactKey": "model",
        "producerTask": "model-upload",
    }
