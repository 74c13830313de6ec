"""kfp-spot: Kubeflow Pipelines components that train on Spot VMs through Vertex AI CustomJobs.

The runtime code in this package never imports ``kfp.dsl``; the KFP interfaces live in
``kfp_spot.components`` and ``kfp_spot.pipelines``.
"""

__all__ = ["RUNTIME_IMAGE", "__version__"]


def __getattr__(name: str) -> str:
    # Lazy: kfp_spot.version reads the installed metadata (importlib.metadata, ~40 ms), which a
    # training process importing kfp_spot.trainer never needs.
    if name in __all__:
        from kfp_spot import version

        value: str = getattr(version, name)
        return value
    raise AttributeError(f"module 'kfp_spot' has no attribute {name!r}")
