"""The launch_spot_job component."""
