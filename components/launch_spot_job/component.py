"""The launch_spot_job component: the KFP interface only; the work is in kfp_spot.jobs."""

from kfp.dsl import Artifact, Input, Metrics, Model, Output, OutputPath

from kfp_spot.components.factory import component


# GCPC's placeholders end in "}\x7d" here: this source is embedded in the task's command,
# where kfp.local resolves input placeholders and fails on these (IndexError). The value, and so
# the compiled default Vertex AI Pipelines fills in, is the placeholder itself.
@component(cacheable=False)
def launch_spot_job(
    checkpoint: Output[Artifact],
    model: Output[Model],
    job_report: Output[Metrics],
    gcp_resources: OutputPath(str),
    project: str = "{{$.pipeline_google_cloud_project_id}\x7d",
    location: str = "{{$.pipeline_google_cloud_location}\x7d",
    display_name: str = "kfp-spot-training",
    package: Input[Artifact] = None,
    python_module: str = "",
    container_image_uri: str = "",
    executor_image_uri: str = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-6:latest",
    command: list = [],
    args: list = [],
    env: dict = {},
    machine_type: str = "n1-standard-4",
    accelerator_type: str = "",
    accelerator_count: int = 0,
    replica_count: int = 1,
    boot_disk_type: str = "pd-ssd",
    boot_disk_size_gb: int = 100,
    worker_pool_specs: list = [],
    base_output_directory: str = "",
    service_account: str = "",
    network: str = "",
    reserved_ip_ranges: list = [],
    psc_interface_config: dict = {},
    encryption_spec_key_name: str = "",
    tensorboard: str = "",
    enable_web_access: bool = False,
    persistent_resource_id: str = "{{$.pipeline_persistent_resource_id}\x7d",
    labels: dict = {},
    timeout: str = "604800s",
    restart_job_on_worker_restart: bool = False,
    disable_retries: bool = False,
    max_wait_duration: str = "86400s",
    resume_from: Input[Artifact] = None,
    max_resubmissions: int = 2,
    fallback_after: int = 0,
    fallback_strategy: str = "STANDARD",
    deadline_seconds: float = 0.0,
    regions: list = [],
    region_policy: str = "STAY",
    region_wait_seconds: float = 0.0,
    region_buckets: dict = {},
    fail_on_incomplete: bool = True,
    api_endpoint: str = "",
    poll_interval_seconds: float = 0.0,
) -> str:
    """Train on Spot VMs with a Vertex AI CustomJob that survives preemption.

    Submits a CustomJob with ``jobSpec.scheduling.strategy = SPOT`` through the Vertex AI
    JobServiceClient (or the local emulator), waits for it, and recovers: a job whose Spot VMs were
    preempted past the service's six restarts is resubmitted on the same checkpoint directory (the
    training resumes), a job whose code failed is not. Records the job in ``gcp_resources`` before
    waiting, so the Vertex console links it, a restarted launcher reattaches instead of submitting a
    duplicate, and cancelling the pipeline cancels the job.

    Inputs that GCPC's ``CustomTrainingJobOp`` also takes have its names and defaults: ``project``,
    ``location`` and ``persistent_resource_id`` default to the pipeline's (filled in by Vertex AI
    Pipelines; elsewhere see docs/launcher.md), and the pipeline run's labels are added to the job's
    so its cost is attributed to the run.

    Args:
        checkpoint: Output (see Returns).
        model: Output (see Returns).
        job_report: Output (see Returns).
        gcp_resources: Output (see Returns).
        project: Google Cloud project the job runs in. Default: the pipeline's project.
        location: Vertex AI region the job runs in, e.g. ``europe-west4``. Default: the
            pipeline's region.
        display_name: The CustomJob's display name.
        package: A training package from prepare_package: ``uri`` is the staged sdist; metadata
            ``package_uris`` (all URIs for the job) and ``python_module``.
        python_module: The module to run (``python -m``); overrides the package's metadata.
        container_image_uri: A custom training container instead of a package.
        command: The container's command (custom containers only; empty: its entrypoint).
        executor_image_uri: The prebuilt training image a package runs in.
        args: Command-line arguments for the training code.
        env: Environment variables for the training code.
        machine_type: Machine type of every replica, e.g. ``n1-standard-4``.
        accelerator_type: Accelerator per replica, e.g. ``NVIDIA_TESLA_T4`` (empty: none).
        accelerator_count: Accelerators per replica.
        replica_count: Replicas in all (one chief, ``replica_count - 1`` workers).
        boot_disk_type: Boot disk of every replica: ``pd-ssd``, ``pd-standard`` or
            ``hyperdisk-balanced``.
        boot_disk_size_gb: Boot disk size in GB.
        worker_pool_specs: Full WorkerPoolSpec dicts for distributed training; replaces the
            machine inputs. Pools without code get the package or container from the inputs.
        base_output_directory: Where the job writes (``AIP_*`` directories): ``gs://BUCKET/PATH``
            (``/gcs/BUCKET/PATH`` is taken as ``gs://BUCKET/PATH``; the local emulator also takes
            an absolute path). Empty: a directory next to this task's outputs.
        service_account: The service account the job runs as (required with ``tensorboard``).
        network: VPC network to peer, ``projects/{number}/global/networks/{name}``.
        reserved_ip_ranges: Names of reserved IP ranges of that network to deploy the job in,
            e.g. ``["vertex-ai-ip-range"]``.
        psc_interface_config: Private Service Connect interface (PSC-I) of the job:
            ``{"networkAttachment": ..., "dnsPeeringConfigs": [{"domain", "targetProject",
            "targetNetwork"}]}``.
        encryption_spec_key_name: Cloud KMS key (CMEK) that encrypts the job's resources,
            ``projects/P/locations/REGION/keyRings/R/cryptoKeys/K``, in the job's region.
        tensorboard: Vertex AI TensorBoard the job uploads its logs to,
            ``projects/P/locations/L/tensorboards/ID``.
        enable_web_access: Interactive shell access to the training containers.
        persistent_resource_id: ID of a persistent resource (same project and region) to run on.
            Default: the pipeline's persistent resource, none when it has none.
        labels: Labels of the CustomJob (the pipeline run's system labels are added; yours win).
        timeout: Longest the job may run, e.g. ``3600s`` (default 7 days).
        restart_job_on_worker_restart: Restart the whole job when a worker restarts.
        disable_retries: Ask Vertex AI not to retry the job on internal errors.
        max_wait_duration: FLEX_START only: longest wait for capacity.
        resume_from: A checkpoint artifact of an earlier run; its newest step seeds this run's
            checkpoint directory, and ``KFP_SPOT_RESUME_FROM`` tells the training code.
        max_resubmissions: New CustomJobs allowed after preemptions exhaust a job or capacity runs
            out (user errors are never resubmitted).
        fallback_after: Fall back to ``fallback_strategy`` after this many Spot jobs ran out of
            capacity (0: never).
        fallback_strategy: ``STANDARD`` or ``FLEX_START``.
        deadline_seconds: Past this many seconds after the first submission, stop waiting for
            Spot capacity and fall back (0: no deadline).
        regions: Regions to run Spot jobs in, in order, e.g. ``["us-central1", "europe-west4"]``
            (empty: only ``location``). A region out of Spot capacity hands on to the next one,
            which resumes from the newest verified checkpoint; a user error is never retried
            anywhere. Spot is tried in every region before ``fallback_strategy`` runs (in the
            first region). Inputs naming a resource of one region (``encryption_spec_key_name``,
            ``tensorboard``, ``persistent_resource_id``) need a single region.
        region_policy: ``STAY``: leave a region once it is out of Spot capacity (a create
            refused for capacity or quota, no start within ``region_wait_seconds``, the job's
            Spot restarts spent); ``EAGER``: also at its first preemption.
        region_wait_seconds: Give up a Spot job that has waited this long for VMs (since its
            create, or since it last ran) and go on in the next region (0: wait as Vertex AI does).
        region_buckets: Region -> ``gs://BUCKET[/PATH]`` in that region, for a region the base
            output directory's bucket is not in (or over, for a multi- or dual-region bucket):
            the newest checkpoint is copied there and verified before the job starts. A region
            that needs one and has none fails the launch before anything is submitted.
        fail_on_incomplete: When False, a launch that ends PREEMPTED_EXHAUSTED, CAPACITY or
            TIMEOUT returns that outcome (with the checkpoint so far) instead of failing the task.
        api_endpoint: The JobService endpoint; empty for Vertex AI, ``http://127.0.0.1:PORT`` for
            the local emulator.
        poll_interval_seconds: Seconds between state polls; 0 picks (quick locally, gentle on
            Vertex AI). Against Vertex AI at least 5: each poll counts against the API quota.

    Returns:
        Output: The outcome: ``SUCCEEDED``, or with ``fail_on_incomplete=False`` also
            ``PREEMPTED_EXHAUSTED``, ``CAPACITY`` or ``TIMEOUT``; gate on it with ``dsl.If``.
        checkpoint: The job's checkpoint directory (``<base>/checkpoints``, the training
            code's ``AIP_CHECKPOINT_DIR``); metadata ``latest_step`` (-1 when none) and
            ``manifest_digest`` of the newest committed step. Another launch's ``resume_from``,
            evaluate_checkpoint's ``checkpoint``.
        model: The job's model directory (``<base>/model``, ``AIP_MODEL_DIR``): promote_model's
            and deploy_spot_endpoint's ``model``.
        job_report: Metrics: attempts, preemptions, resubmissions, billable_seconds,
            work_lost_seconds, cost_spot_usd, cost_on_demand_usd, savings_usd, goodput; the full
            per-attempt report is the artifact's file (JSON).
        gcp_resources: Every CustomJob the task created, oldest first, in GCPC's
            GcpResources JSON (one resource per job; the last is the latest), as GCPC's
            ``CustomTrainingJobOp`` outputs it.
    """
    from kfp_spot.jobs.entry import launch_spot_job as _run

    return _run(**{k: v for k, v in locals().items() if k != "_run"})
