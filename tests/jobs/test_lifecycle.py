import pytest

from jobs import lifecycle
from jobs.lifecycle import IllegalTransition


@pytest.mark.parametrize(
    "current,target",
    [
        ("queued", "admitted"),
        ("admitted", "starting"),
        ("starting", "running"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("queued", "cancelled"),
        ("running", "preempted"),
        ("starting", "preempted"),
        ("admitted", "preempted"),
        ("preempted", "queued"),
        ("starting", "failed"),
    ],
)
def test_it_allows_the_transitions_of_the_design(current, target):
    assert lifecycle.check(current, target) == target


@pytest.mark.parametrize(
    "current,target",
    [
        ("succeeded", "running"),
        ("failed", "queued"),
        ("cancelled", "queued"),
        ("queued", "running"),
        ("queued", "preempted"),
        ("preempted", "running"),
        ("running", "queued"),
    ],
)
def test_it_refuses_illegal_transitions_with_a_message(current, target):
    with pytest.raises(IllegalTransition, match=f"A {current} job cannot become {target}."):
        lifecycle.check(current, target)


def test_it_fills_in_steps_an_observer_missed():
    assert lifecycle.path("starting", "succeeded") == ["running", "succeeded"]
    assert lifecycle.path("admitted", "running") == ["starting", "running"]
    assert lifecycle.path("admitted", "succeeded") == ["starting", "running", "succeeded"]
    assert lifecycle.path("running", "failed") == ["failed"]
    with pytest.raises(IllegalTransition):
        lifecycle.path("succeeded", "running")


def test_every_final_status_is_a_dead_end_and_gpus_are_held_only_while_admitted():
    for status in lifecycle.FINAL:
        assert lifecycle.TRANSITIONS[status] == frozenset()
    assert lifecycle.HOLDS_GPUS == {"admitted", "starting", "running"}
    assert set(lifecycle.TRANSITIONS) == set(lifecycle.STATUSES)
