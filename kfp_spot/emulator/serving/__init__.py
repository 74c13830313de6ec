"""The emulator's Model, Endpoint and Prediction services and their serving replicas.

- ``store``: ``serving.sqlite`` (models, endpoints, deployments, operations, the serving ledger);
- ``pool``: the replicas of one deployed model (start, health, preemption, restart, routing);
- ``api``: ``ServingService``, the API methods;
- ``routes``: the HTTP routes, hooked into the emulator's server.
"""
