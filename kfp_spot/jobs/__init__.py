"""The launcher: build a Spot CustomJob, submit it, watch it, recover it, report on it.

``kfp_spot.jobs.entry.launch_spot_job`` is what the component calls; the pieces are usable alone:
:mod:`~kfp_spot.jobs.inputs` (the input table: read, check, which input set a field),
:mod:`~kfp_spot.jobs.spec` (inputs -> CustomJob), :mod:`~kfp_spot.vertex.client` (the
JobServiceClient), :mod:`~kfp_spot.jobs.backend` (Vertex AI or the emulator: timings, ledger,
logs, how attempts are observed), :mod:`~kfp_spot.jobs.gcp_resources`,
:mod:`~kfp_spot.jobs.service` (polling and retries), :mod:`~kfp_spot.jobs.watch` (each attempt
logged as it happens), :mod:`~kfp_spot.jobs.outcome`, :mod:`~kfp_spot.jobs.recovery` (the ladder)
and :mod:`~kfp_spot.jobs.report` (the job report, from :mod:`kfp_spot.accounting`).
"""

from kfp_spot.jobs.inputs import JobInputs, LaunchInputError
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.spec import build_custom_job

__all__ = ["JobInputs", "LaunchInputError", "Outcome", "build_custom_job"]
