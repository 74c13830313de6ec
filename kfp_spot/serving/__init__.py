"""Spot inference: deploy a model to a Vertex AI endpoint on Spot VMs.

- ``deploy``: upload, create or reuse an endpoint, deploy on Spot, reattach, cancel (the rules
  it checks first are the floor's, :mod:`kfp_spot.vertex.model_endpoint`);
- ``entry``: the one call the ``deploy_spot_endpoint`` component makes.

What serves a model locally (the serving environment, the prediction server) is the emulator's:
:mod:`kfp_spot.emulator.serving`.
"""
