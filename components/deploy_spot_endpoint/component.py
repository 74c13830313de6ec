"""The deploy_spot_endpoint component: the KFP interface only; the work is in kfp_spot.serving."""

from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel
from kfp.dsl import Input, Model, Output, OutputPath

from kfp_spot.components.factory import component


# GCPC's placeholders end in "}\x7d" here: this source is embedded in the task's command,
# where kfp.local resolves input placeholders and fails on these (IndexError). The value, and so
# the compiled default Vertex AI Pipelines fills in, is the placeholder itself.
@component(cacheable=False)
def deploy_spot_endpoint(
    endpoint: Output[VertexEndpoint],
    vertex_model: Output[VertexModel],
    gcp_resources: OutputPath(str),
    project: str = "{{$.pipeline_google_cloud_project_id}\x7d",
    model: Input[Model] = None,
    artifact_uri: str = "",
    uploaded_model: Input[VertexModel] = None,
    target_endpoint: Input[VertexEndpoint] = None,
    location: str = "{{$.pipeline_google_cloud_location}\x7d",
    model_display_name: str = "kfp-spot-model",
    endpoint_display_name: str = "kfp-spot-endpoint",
    deployed_model_display_name: str = "",
    serving_container_image_uri: str = (
        "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-6:latest"
    ),
    serving_container_command: list = [],
    serving_container_args: list = [],
    serving_container_env: dict = {},
    serving_container_ports: list = [],
    serving_container_predict_route: str = "",
    serving_container_health_route: str = "",
    machine_type: str = "n1-standard-4",
    accelerator_type: str = "",
    accelerator_count: int = 0,
    min_replica_count: int = 2,
    max_replica_count: int = 0,
    traffic_split: dict = {"0": 100},
    spot: bool = True,
    service_account: str = "",
    labels: dict = {},
    encryption_spec_key_name: str = "",
    api_endpoint: str = "",
    timeout_seconds: float = 3600.0,
    poll_interval_seconds: float = 0.0,
) -> str:
    """Serve a model from a Vertex AI endpoint on Spot VMs.

    Uploads the model directory with a serving image (a prebuilt scikit-learn / XGBoost image or
    your own container), creates an endpoint (or uses ``target_endpoint``) and deploys the model
    with ``dedicatedResources.spot = true`` through the Vertex AI ModelService and EndpointService
    clients (or the local emulator). GCPC's ``ModelDeployOp`` has no Spot option; the outputs use
    GCPC's artifact types, so ``ModelDeployOp``, ``ModelUndeployOp`` or ``EndpointDeleteOp`` take
    them as they are. The operations are recorded in ``gcp_resources`` before the task waits:
    a retried task reattaches instead of deploying twice, and cancelling the pipeline cancels the
    deployment (a deployment that still completes is undeployed, so no Spot VM keeps running).

    Spot replicas can be preempted at any time: with ``min_replica_count >= 2`` the endpoint keeps
    answering through the other replicas while a preempted one comes back; with 1 a preemption is
    an outage until it does.

    Args:
        endpoint: Output (see Returns).
        vertex_model: Output (see Returns).
        gcp_resources: Output (see Returns).
        project: Google Cloud project ID; default: the pipeline's (as GCPC's ModelUploadOp),
            ``local-project`` on the local emulator when nothing fills it in.
        model: The model directory (e.g. the launch step's ``model`` output, ``AIP_MODEL_DIR``):
            for a prebuilt image it holds exactly one of ``model.joblib`` or ``model.pkl``
            (XGBoost: also ``model.bst``).
        artifact_uri: The model directory as a URI instead of ``model`` (gs:// on Vertex AI).
        uploaded_model: A model already in the Vertex AI Model Registry (e.g. GCPC's
            ``ModelUploadOp`` output) to deploy instead of uploading ``model``.
        target_endpoint: An existing endpoint (e.g. GCPC's ``EndpointCreateOp`` output) to
            deploy to; empty: a new endpoint (reused by a retry of this task).
        location: Vertex AI region, e.g. ``europe-west4``; default: the pipeline's region
            (``us-central1`` on the local emulator when nothing fills it in).
        model_display_name: Display name of the uploaded model.
        endpoint_display_name: Display name of a new endpoint.
        deployed_model_display_name: Display name of the DeployedModel (empty: the model's).
        serving_container_image_uri: The serving image: a prebuilt prediction image
            (``{us,europe,asia}-docker.pkg.dev/vertex-ai/prediction/IMAGE:latest``) or your own.
        serving_container_command: Your container's entrypoint (custom containers only).
        serving_container_args: Arguments of your container's entrypoint.
        serving_container_env: Environment variables of the serving container.
        serving_container_ports: Ports your container listens on (the first gets the traffic).
        serving_container_predict_route: The path predictions are posted to (custom containers).
        serving_container_health_route: The path health checks ask (custom containers).
        machine_type: Machine type of every replica, e.g. ``n1-standard-4``.
        accelerator_type: Accelerator per replica, e.g. ``NVIDIA_TESLA_T4`` (empty: none).
        accelerator_count: Accelerators per replica.
        min_replica_count: Replicas always running (>= 1; 2 or more rides out a preemption).
        max_replica_count: Most replicas under load (0: ``min_replica_count``).
        traffic_split: Deployed model id -> percentage of the endpoint's traffic; ``"0"`` is the
            model being deployed. Must add up to 100 (default: all traffic to it).
        spot: Deploy on Spot VMs (False: standard VMs, e.g. to compare).
        service_account: The service account the serving container runs as.
        labels: Labels of the uploaded model and a new endpoint; the pipeline run's system labels
            are added (yours win), as GCPC's ModelUploadOp and EndpointCreateOp add them.
        encryption_spec_key_name: Cloud KMS key (CMEK) of the uploaded model and a new endpoint,
            ``projects/P/locations/L/keyRings/R/cryptoKeys/K`` in ``location`` (empty: Google's).
        api_endpoint: Empty for Vertex AI; ``http://127.0.0.1:PORT`` for the local emulator.
        timeout_seconds: Longest wait for one operation (upload, endpoint, deploy).
        poll_interval_seconds: Seconds between operation polls; 0 picks (quick locally). Against
            Vertex AI at least 5: each poll counts against the API quota.

    Returns:
        Output: The deployed model's ID.
        endpoint: The endpoint (``google.VertexEndpoint``; metadata ``resourceName``,
            ``deployedModelId``, ``spot``, ``machineType``, ``minReplicaCount``).
        vertex_model: The uploaded model (``google.VertexModel``, ``resourceName``
            ``projects/P/locations/L/models/ID@1``), or ``uploaded_model`` when given.
        gcp_resources: The operations and the endpoint in GCPC's GcpResources JSON.
    """
    from kfp_spot.serving.entry import deploy_spot_endpoint as _run

    return _run(**{k: v for k, v in locals().items() if k != "_run"})
