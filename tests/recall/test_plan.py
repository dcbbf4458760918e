"""Recall queries: what a message asks."""

from cascade_cli.recall.plan import (
    QUERY_CHARS,
    QUOTE_ROOM,
    RECALL_SHARE,
    arrange,
    block_for,
    query_of,
    reserve,
    staying,
)


def test_short_messages_are_their_own_query() -> None:
    assert query_of("What is my locker code?") == "What is my locker code?"


def test_long_messages_ask_their_last_sentences() -> None:
    pasted = "Emma Woodhouse, handsome, clever, and rich, lived in Highbury. " * 20
    query = query_of(pasted + "Who is the heroine of this passage?")
    assert len(query) <= QUERY_CHARS
    assert query.endswith("Who is the heroine of this passage?")
    assert query.startswith("Emma Woodhouse")  # cut at a sentence start, not mid-word


def test_one_reserve_rule_for_every_window() -> None:
    assert reserve(256, 2048) == 256  # ask's default answer
    assert reserve(512, 1024) == 256  # at most a quarter of the window
    assert reserve(512, 1024, closing=3) == 259  # a chat reply's closing tokens come on top
    assert reserve(0, 1024) == 1


def test_pieces_fit_the_recall_share() -> None:
    assert block_for(512, 4096) == 512
    assert block_for(512, 1024) == int(1024 * RECALL_SHARE)
    assert block_for(512, 32) == 16


def test_the_newest_turns_stay_leaving_the_recall_share_and_the_quote_room() -> None:
    sizes = [300] * 10
    n = staying(sizes, 4096, head=40, tail=600)
    kept = 300 * n
    assert kept <= 4096 - 40 - 600 - QUOTE_ROOM - int(4096 * RECALL_SHARE) < kept + 300
    assert staying(sizes, 4096, 40, 600, quoting=False) >= n


def test_adjacent_chunks_stay_together_and_the_best_run_sits_last() -> None:
    assert arrange([7, 2, 8, 3]) == [2, 3, 7, 8]  # best (7) in the run nearest the question
    assert arrange([2, 7, 8, 3]) == [7, 8, 2, 3]
    assert arrange([7, 2], "document") == [2, 7]
