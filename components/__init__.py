"""KFP components of kfp-spot (import namespace ``kfp_spot.components``).

Each component lives in its own folder: ``component.py`` (the KFP interface) and the compiled,
committed ``component.yaml``.
"""

from kfp_spot.components.deploy_spot_endpoint import DeploySpotEndpointOp
from kfp_spot.components.evaluate_checkpoint import EvaluateCheckpointOp
from kfp_spot.components.launch_spot_job import LaunchSpotJobOp
from kfp_spot.components.prepare_package import PreparePackageOp
from kfp_spot.components.promote_model import PromoteModelOp

__all__ = [
    "DeploySpotEndpointOp",
    "EvaluateCheckpointOp",
    "LaunchSpotJobOp",
    "PreparePackageOp",
    "PromoteModelOp",
]
