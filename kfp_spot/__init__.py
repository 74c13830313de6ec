"""kfp-spot: Kubeflow Pipelines components that train on Spot VMs through Vertex AI CustomJobs.

The runtime code in this package never imports ``kfp.dsl``; the KFP interfaces live in
``kfp_spot.components`` and ``kfp_spot.pipelines``.
"""

from kfp_spot.version import RUNTIME_IMAGE, __version__

__all__ = ["RUNTIME_IMAGE", "__version__"]
