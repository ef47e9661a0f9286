"""Which mined pairs agent DPO learns from: the finish direction of a pair and the balance, table-tested."""

import pytest

from clap.agent import chat, preferences
from clap.agent.preferences import TOO_EARLY, TOO_LATE

SEARCH = chat.Action("Find.", "search_reports", {"query": "Apex Precision net profit 2022"}).text()
READ = chat.Action("Read.", "read_chunk", {"chunk_id": "c01-annual-2022-p1"}).text()
RIGHT = chat.Action("Answer.", "finish", {"answer": "1,234.50 万元"}).text()
WRONG = chat.Action("Answer.", "finish", {"answer": "1000 万元"}).text()
ABSTAIN = chat.Action("Answer.", "finish", {"answer": "not found"}).text()


def pair(pair_id, chosen, rejected, draw="greedy"):
    return {"pair_id": pair_id, "chosen": chosen, "rejected": rejected, "draw": draw}


@pytest.mark.parametrize("name, chosen, rejected, expected", [
    ("finishes where gold reads the page", READ, RIGHT, TOO_EARLY),
    ("abstains where gold searches", SEARCH, ABSTAIN, TOO_EARLY),
    ("reads again where gold finishes", RIGHT, READ, TOO_LATE),
    ("wrong answer: both finish", RIGHT, WRONG, None),
    ("wrong tool: both call tools", READ, SEARCH, None),
    ("no action at all where gold finishes", RIGHT, "I will look it up.", None),
    ("truncated JSON where gold reads", READ, '{"thought": "Answer.", "tool": "finish", "argu', None),
])
def test_finish_direction(name, chosen, rejected, expected):
    assert preferences.finish_direction(pair("p", chosen, rejected)) == expected, name


@pytest.mark.parametrize("name, early, late, other, kept_early", [
    ("more too-early than too-late: capped at the too-late count", 5, 2, 3, 2),
    ("balanced already: all kept", 2, 2, 1, 2),
    ("fewer too-early: all kept", 1, 3, 0, 1),
    ("no too-late pair: every too-early one left out", 3, 0, 2, 0),
    ("no finish pair at all", 0, 0, 4, 0),
])
def test_balance_finish_caps_too_early_pairs_and_keeps_the_rest(name, early, late, other, kept_early):
    pairs = ([pair(f"e{i}", READ, RIGHT) for i in range(early)] + [pair(f"l{i}", RIGHT, SEARCH) for i in range(late)]
             + [pair(f"o{i}", READ, SEARCH) for i in range(other)])
    kept, left_out = preferences.balance_finish(pairs)
    assert preferences.finish_counts(kept) == {TOO_EARLY: kept_early, TOO_LATE: late}, name
    assert len(kept) == kept_early + late + other and len(kept) + len(left_out) == len(pairs), name
    assert all(preferences.finish_direction(p) == TOO_EARLY for p in left_out), name
    assert kept == [p for p in pairs if p in kept], "kept pairs keep their order"


def test_the_greedy_draws_mistakes_stay_first_and_the_choice_is_the_same_every_run():
    early = [pair("e3", READ, RIGHT, "sample0"), pair("e1", READ, RIGHT, "sample0"), pair("e2", READ, RIGHT),
             pair("e0", SEARCH, ABSTAIN)]
    late = [pair("l0", RIGHT, READ), pair("l1", RIGHT, SEARCH, "sample0"), pair("l2", RIGHT, READ)]
    kept, left_out = preferences.balance_finish(early + late)
    assert [p["pair_id"] for p in left_out] == ["e3"]
    assert [p["pair_id"] for p in kept if preferences.finish_direction(p) == TOO_EARLY] == ["e1", "e2", "e0"]
    assert preferences.balance_finish(list(reversed(early + late)))[1] == left_out
