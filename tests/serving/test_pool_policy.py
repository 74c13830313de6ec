"""When a Spot serving replica is preempted: the training policy's clocks, per replica life."""

from kfp_spot.emulator.policy import PreemptionPolicy
from kfp_spot.emulator.serving.pool import spot_delay


def test_each_life_follows_the_attempt_offsets_then_the_random_clocks():
    policy = PreemptionPolicy(preempt_at=(2.0, 5.0), seed=1)
    assert [spot_delay(policy, 1, 0, life) for life in (1, 2, 3)] == [2.0, 5.0, None]


def test_the_per_vm_clock_reaches_serving_replicas_and_the_earlier_clock_wins():
    policy = PreemptionPolicy(preempt_at=(1000.0,), preempt_vm_every=3.0, seed=7)
    drawn = [spot_delay(policy, 1, replica, 1) for replica in range(4)]
    assert all(d is not None and 0 < d < 1000.0 for d in drawn)
    assert len(set(drawn)) == 4  # one clock per replica
    assert drawn == [spot_delay(policy, 1, replica, 1) for replica in range(4)]  # seeded
    assert spot_delay(policy, 2, 0, 1) != drawn[0]  # another deployment, other draws


def test_training_replica_names_never_preempt_a_serving_replica():
    policy = PreemptionPolicy(preempt_vm_at={"workerpool0-0": (1.0,)})
    assert spot_delay(policy, 1, 0, 1) is None
