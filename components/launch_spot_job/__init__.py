"""The launch_spot_job component."""

from kfp_spot.components.launch_spot_job.component import launch_spot_job

LaunchSpotJobOp = launch_spot_job

__all__ = ["LaunchSpotJobOp", "launch_spot_job"]
