"""Job states, error codes and timing constants shared by the emulator's modules."""

from __future__ import annotations

HEARTBEAT = 0.5  # a SIGKILLed emulator under-bills the running attempt by at most this

QUEUED = "JOB_STATE_QUEUED"
PENDING = "JOB_STATE_PENDING"
RUNNING = "JOB_STATE_RUNNING"
SUCCEEDED = "JOB_STATE_SUCCEEDED"
FAILED = "JOB_STATE_FAILED"
CANCELLING = "JOB_STATE_CANCELLING"
CANCELLED = "JOB_STATE_CANCELLED"
ACTIVE_STATES = (QUEUED, PENDING, RUNNING, CANCELLING)

# google.rpc.Code values used in job errors.
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_RESOURCE_EXHAUSTED = 8
CODE_FAILED_PRECONDITION = 9
CODE_CANCELLED = 1
CODE_INTERNAL = 13
