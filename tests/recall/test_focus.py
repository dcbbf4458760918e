"""The quote's window: the words around the question's words, at most `most` of them."""

from __future__ import annotations

from cascade_cli.recall.focus import focus
from cascade_cli.recall.passages import WORD

LONG = (
    "She was the youngest of the two daughters of a most affectionate, indulgent father; and "
    "had, in consequence of her sister's marriage, been mistress of his house from a very early "
    "period. Her mother had died too long ago for her to have more than an indistinct "
    "remembrance of her caresses; and her place had been supplied by an excellent woman as "
    "governess, who had fallen little short of a mother in affection."
)


def test_a_short_passage_is_quoted_whole() -> None:
    text = "My locker code is 4821. Please remember it."
    assert focus(text, "What is my locker code?", 32) == text
    assert focus(LONG, "anything", 0) == LONG


def test_a_long_passage_keeps_the_window_around_the_question_words() -> None:
    cut = focus(LONG, "Who took the place of her mother as governess?", 24)
    assert len(WORD.findall(cut.replace("…", ""))) == 24
    assert "governess" in cut and "place" in cut and cut.startswith("… ")
    assert "youngest" not in cut  # the passage's start, far from every question word
    early = focus(LONG, "Whose house was she mistress of?", 24)
    assert "mistress of his house" in early and "governess" not in early
    assert early.endswith(" …")


def test_plural_and_case_still_match() -> None:
    text = " ".join(["filler"] * 40) + " The Lockers open with code 7. " + " ".join(["x"] * 40)
    assert "code 7" in focus(text, "which locker code?", 10)


def test_no_question_word_keeps_the_start() -> None:
    assert focus(LONG, "zebra quantum", 8).startswith("She was the youngest")


def test_unspaced_scripts_match_by_character() -> None:
    text = "这是一个很长的句子里面有很多很多的字用来测试。我的储物柜密码是四八二一。请记住它。"
    cut = focus(text, "储物柜密码是什么？", 12)
    assert "储物柜密码" in cut and "这是一个" not in cut


def test_the_window_opens_at_the_sentence_with_the_question_words_and_reads_on() -> None:
    """The answer tends to follow the words a question shares with the text: of the windows
    holding the most question words, one that opens a sentence, the latest such."""
    text = (
        "Filler words come first here and they say nothing at all about it. "
        "The step address selects every Nth line. One would use 0~2 for the even lines "
        "and 1~2 for the odd ones. More filler follows and it says nothing useful either."
    )
    cut = focus(text, "Which step address picks even lines?", 22)
    assert cut.startswith("… The step address") and "1~2 for the odd ones." in cut
