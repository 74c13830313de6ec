"""The emulator's Model, Endpoint and Prediction services and their serving replicas.

- ``store``: ``serving.sqlite`` (models, endpoints, deployments, operations, the serving ledger);
- ``pool``: the replicas of one deployed model (start, health, preemption, restart, routing);
- ``catalog``: names, request parsing, operations, paging, and the rows viewed as protos;
- ``launch``: one replica's command line and environment (prebuilt image or custom container);
- ``env``: the Python a prebuilt image's replica runs in (the image's libraries only);
- ``predictor.py``: the standalone prediction server such a replica runs (it imports nothing of
  kfp-spot);
- ``deployments``: the replica pools of deployed models; deploy, undeploy, cancel, recover;
- ``models``, ``endpoints``, ``prediction``: the ModelService, EndpointService and
  PredictionService methods;
- ``api``: ``ServingService``, the parts as one service (plus operations and the ledger);
- ``routes``: the HTTP routes, rows of the emulator's one route table (``routing``).
"""
