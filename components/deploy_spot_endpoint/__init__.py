"""The deploy_spot_endpoint component."""

from kfp_spot.components.deploy_spot_endpoint.component import (
    deploy_spot_endpoint as DeploySpotEndpointOp,
)

__all__ = ["DeploySpotEndpointOp"]
