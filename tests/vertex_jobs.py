"""The real GAPIC JobServiceClient on the local emulator, and a python-package CustomJob to send."""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1

from kfp_spot import executors


def job_client(endpoint: str) -> aiplatform_v1.JobServiceClient:
    """``JobServiceClient`` (REST, anonymous) for an emulator at ``http://127.0.0.1:PORT``."""
    return aiplatform_v1.JobServiceClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=endpoint),
    )


def package_job(
    package_uris: Sequence[str],
    python_module: str,
    *,
    image: str = executors.DEFAULT_EXECUTOR_IMAGE,
    base: str | PathLike[str] | None = None,
    args: Sequence[str] = (),
    display_name: str | None = None,
    spot: bool = True,
) -> aiplatform_v1.CustomJob:
    """One n1-standard-4 replica running ``python -m python_module`` from ``package_uris``.

    Args:
        image: the executor image.
        base: the base output directory (None: none).
        args: the module's arguments.
        display_name: default: the module with ``-`` for ``.``.
        spot: schedule it on Spot VMs.
    """
    spec = aiplatform_v1.CustomJobSpec(
        worker_pool_specs=[
            aiplatform_v1.WorkerPoolSpec(
                machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-standard-4"),
                replica_count=1,
                python_package_spec=aiplatform_v1.PythonPackageSpec(
                    executor_image_uri=image,
                    package_uris=list(package_uris),
                    python_module=python_module,
                    args=list(args),
                ),
            )
        ]
    )
    if spot:
        spec.scheduling = aiplatform_v1.Scheduling(strategy=aiplatform_v1.Scheduling.Strategy.SPOT)
    if base is not None:
        spec.base_output_directory = aiplatform_v1.GcsDestination(output_uri_prefix=str(base))
    return aiplatform_v1.CustomJob(
        display_name=display_name or python_module.replace(".", "-"), job_spec=spec
    )
