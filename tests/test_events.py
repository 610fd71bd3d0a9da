"""dcode.events: the stream's types serialise as plain JSON, and drain runs a stream one way for
every consumer (the result, each event in order, the generator closed, a wrong ending caught)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch

from dcode.events import Edited, Finished, Repaired, RepairRound, Span, Started, Step, drain
from dcode.syntax import find_issues

ISSUES = tuple(find_issues("def f(:\n    return 1\n", "python"))
SPAN = Span(start_byte=0, end_byte=7, tokens=(0, 4), reason="syntax error, line 1")
ROUND = RepairRound(1, 2, ISSUES, (SPAN,), tokens=4, masks=6, forward=3, issues_after=0, kept=True, restored=0)
REPAIRED = Repaired("def f():\n    return 1\n", 1, 0, (), 1, 2, 1, 4, 3, 0.25)
FINISHED = Finished("def f():\n    return 1\n", 12, 9, 16, 5, 0.5, repair=REPAIRED, draft="def f(:\n    return 1\n")
EDITED = Edited("x = 2\n", (0, 6), (0, 6), 10, 0, 3, 3, 19, 2, 0.1, 0, 0)


def step(forward: int) -> Step:
    return Step(torch.tensor([5, 6]), torch.tensor([1]), torch.ones(1), (0, 2), forward, 2, 0, True)


@pytest.mark.parametrize("event", [Started((12, 28), ((12, 28),)), ROUND, REPAIRED, FINISHED, EDITED])
def test_every_event_but_step_is_plain_json(event: object) -> None:
    data = json.loads(json.dumps(asdict(event)))  # type: ignore[call-overload]
    assert data and all(isinstance(key, str) for key in data)


def test_a_repair_round_carries_what_the_wire_sends() -> None:
    data = asdict(ROUND)
    assert (data["round"], data["attempt"], data["issues_after"], data["kept"]) == (1, 2, 0, True)
    assert [(s["start_byte"], s["end_byte"]) for s in data["spans"]] == [(0, 7)]
    assert data["issues"][0]["line"] == 1 and ISSUES  # the checker found the broken line


def test_metadata_nests_the_repair_record() -> None:
    meta = FINISHED.metadata()
    assert meta["repair"] == REPAIRED.metadata() and meta["forward_passes"] == 5
    assert EDITED.metadata()["region"] == {"start_byte": 0, "end_byte": 6} and "repair" not in EDITED.metadata()
    assert Started((12, 28), ()).prompt_tokens == 12


def test_drain_returns_the_last_event_and_shows_each_in_order() -> None:
    stream = [Started((0, 2), ((0, 2),)), step(1), step(2), FINISHED]
    seen: list[object] = []
    assert drain(iter(stream), seen.append) is FINISHED
    assert seen == stream
    assert drain(iter([])) is None
    assert drain(iter(stream), result=Finished) is FINISHED
    with pytest.raises(TypeError, match="ended with Step, not Finished"):
        drain(iter(stream[:2]), result=Finished)


def test_drain_closes_the_generator_when_its_consumer_stops() -> None:
    closed = []

    def stream():
        try:
            for forward in range(1, 100):
                yield step(forward)
        finally:
            closed.append(True)

    def stop_at_three(event: Step) -> None:
        if event.forward == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drain(stream(), stop_at_three)
    assert closed == [True]
