"""Elastic data-parallel training on Spot VMs: the job slows down while a worker is away."""
