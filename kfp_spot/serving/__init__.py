"""Spot inference: deploy a model to a Vertex AI endpoint on Spot VMs, and what serves it locally.

- ``images``: Vertex AI's prebuilt prediction images and the model files each loads;
- ``env``: the Python a local serving replica runs in (one seam);
- ``predictor``: the standalone prediction server a local replica of a prebuilt image runs;
- ``deploy``: upload, create or reuse an endpoint, deploy on Spot, reattach, cancel;
- ``entry``: the one call the ``deploy_spot_endpoint`` component makes.
"""
