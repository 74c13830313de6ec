"""What one launch takes and gives: :class:`LaunchRequest`, :class:`LaunchResult`, the failure.

The launcher (:mod:`kfp_spot.jobs.launcher`, which re-exports these names) runs a request and
returns a result or raises :class:`LaunchFailedError` carrying it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kfp_spot import checkpoints
from kfp_spot.jobs.inputs import JobInputs
from kfp_spot.jobs.outcome import Outcome
from kfp_spot.jobs.recovery import RecoveryPolicy, Submission
from kfp_spot.jobs.report import JobReport

__all__ = ["LaunchFailedError", "LaunchRequest", "LaunchResult"]


class LaunchFailedError(RuntimeError):
    """The launch ended without success; carries the outcome and the job's own message."""

    def __init__(self, outcome: Outcome, message: str, result: LaunchResult | None = None):
        super().__init__(f"{outcome.value}: {message}")
        self.outcome = outcome
        self.job_message = message
        self.result = result


@dataclass
class LaunchRequest:
    """Everything one launch needs."""

    inputs: JobInputs
    base_output_directory: str
    gcp_resources_path: str
    run_key: str  # unique to this task run (e.g. the checkpoint output's URI)
    policy: RecoveryPolicy = field(default_factory=RecoveryPolicy)
    api_endpoint: str = ""
    poll_interval_seconds: float = 0.0
    resume_from: str = ""  # checkpoint directory of a previous run
    cancel_wait_seconds: float = 0.0  # 0: the backend's own (kfp_spot.jobs.backend)
    # region -> gs:// directory for that region's copy of the checkpoints, when the base output
    # directory's bucket is not in (or over) that region
    region_buckets: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchResult:
    """What became of the launch."""

    outcome: Outcome
    message: str
    checkpoint_dir: str
    model_dir: str
    latest: checkpoints.Manifest | None
    report: JobReport
    submissions: list[Submission]
    resumed_from: checkpoints.Manifest | None = None
