"""Recall queries: what a message asks."""

from cascade_cli.paging.plan import QUERY_CHARS, query_of


def test_short_messages_are_their_own_query() -> None:
    assert query_of("What is my locker code?") == "What is my locker code?"


def test_long_messages_ask_their_last_sentences() -> None:
    pasted = "Emma Woodhouse, handsome, clever, and rich, lived in Highbury. " * 20
    query = query_of(pasted + "Who is the heroine of this passage?")
    assert len(query) <= QUERY_CHARS
    assert query.endswith("Who is the heroine of this passage?")
    assert query.startswith("Emma Woodhouse")  # cut at a sentence start, not mid-word
