"""An API request's messages as the token segments a chat session would hold.

A conversation renders as the system prompt (segment 0, with BOS), then one segment per turn —
a user message, the reply and the template's closing tokens, exactly as `cascade chat` stores a
turn — then the last user message with the reply header, which is the prompt's open end. Other
shapes (two user messages in a row, a reply without a question, a system message mid-way) get a
segment per message. Segments are cut into blocks of at most `block` tokens from their start,
so the blocks a request sees are the blocks the next request (the same conversation plus the
reply) sees again. Message text is never parsed for special tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cascade_cli.errors import InputError
from cascade_cli.prompts.types import Message
from cascade_cli.store.address import address
from cascade_cli.window.turns import Template


@dataclass
class Block:
    """A piece of the prompt whose KV can be stored: its content address and token ids."""

    hash: str  # sha256 of (model fingerprint, the previous block's hash, these token ids)
    tokens: list[int] = field(repr=False)
    text: str = field(repr=False)  # what recall indexes ("" for the system prompt)
    turn: int = 0  # 0: the system prompt; else the segment's number


@dataclass
class Prompt:
    """A rendered request: stored-able blocks, then the tail decoded for every request."""

    blocks: list[Block]
    tail: list[int]
    question: str  # the last user message (what recall searches with)
    open_turn: list[int] = field(default_factory=list)  # tokens of the unfinished last segment

    @property
    def n_tokens(self) -> int:
        return sum(len(b.tokens) for b in self.blocks) + len(self.tail)


def block_address(fingerprint: str, parent: str, tokens: list[int]) -> str:
    """A block's content address: the tokens and everything before them, for one model (the
    same digest the blocks of earlier releases were stored under)."""
    return address(fingerprint, parent, tokens)


def salted(fingerprint: str, salt: str) -> str:
    """The fingerprint a request's addresses start from: with a cache_salt, every block address
    differs from an unsalted (or otherwise salted) request's, so no block is shared."""
    if not salt:
        return fingerprint
    return f"{fingerprint}\0salt:{address(salt)}"


def _role(m: Message) -> str:
    return "system" if m.role == "developer" else m.role


def segments(
    tpl: Template, messages: list[Message], default_system: str
) -> tuple[list[tuple[list[int], str]], list[int], str]:
    """([(tokens, text)] of finished segments, the open last segment's tokens, the question)."""
    if not messages:
        raise InputError("messages is empty", "Send at least one message.")
    n_lead = 0
    while n_lead < len(messages) and _role(messages[n_lead]) == "system":
        n_lead += 1
    lead = [m.content for m in messages[:n_lead]]
    msgs = messages[n_lead:]  # one slice: no pop(0) per leading message (quadratic)
    system = "\n\n".join(lead) if lead else default_system
    out: list[tuple[list[int], str]] = [(tpl.system(system), "")]
    question = ""
    i = 0
    while i < len(msgs):
        m, role = msgs[i], _role(msgs[i])
        last = i == len(msgs) - 1
        if role == "user":
            question = m.content
            if last:
                return out, tpl.user(m.content), question
            if _role(msgs[i + 1]) == "assistant":
                reply = msgs[i + 1].content
                if i + 1 == len(msgs) - 1:  # a reply to continue (assistant prefill)
                    return out, tpl.user(m.content) + tpl.reply(reply), question
                tokens = tpl.user(m.content) + tpl.reply(reply) + tpl.close()
                out.append((tokens, f"User: {m.content}\nAssistant: {reply}"))
                i += 2
                continue
            tokens = tpl.special(tpl.user_open) + tpl.plain(m.content)
            out.append((tokens + tpl.special(tpl.user_close), f"User: {m.content}"))
        elif role == "assistant":
            head = tpl.special(tpl.header) + tpl.reply(m.content)
            if last:
                return out, head, question
            out.append((head + tpl.close(), f"Assistant: {m.content}"))
        else:  # a system message after the conversation began
            tokens = tpl.special(tpl.sys_open) + tpl.plain(m.content) + tpl.special(tpl.sys_close)
            out.append((tokens, f"System: {m.content}"))
        i += 1
    return out, tpl.special(tpl.header), question  # ends with a system message: reply to it


def cut(tokens: list[int], block: int) -> list[list[int]]:
    """A segment's blocks: `block`-token pieces from its start."""
    return [tokens[o : o + block] for o in range(0, len(tokens), block)]


def chain(
    fingerprint: str,
    finished: list[tuple[list[int], str]],
    open_turn: list[int],
    block: int,
    detokenize: Callable[[list[int]], str],
) -> tuple[list[Block], list[int]]:
    """Blocks of the finished segments and the open segment's full blocks (all but its last
    piece), each addressed by its content and what precedes it; returns (blocks, tail)."""
    blocks: list[Block] = []
    parent = ""
    for turn, (tokens, text) in enumerate(finished):
        pieces = cut(tokens, block) if turn else [tokens]
        for piece in pieces:
            parent = block_address(fingerprint, parent, piece)
            words = text if len(pieces) == 1 else detokenize(piece)
            blocks.append(Block(parent, piece, words, turn))
    pieces = cut(open_turn, block)
    tail = pieces.pop() if pieces else []
    for piece in pieces:
        parent = block_address(fingerprint, parent, piece)
        blocks.append(Block(parent, piece, detokenize(piece), len(finished)))
    return blocks, tail


def finished_turn(
    tpl: Template,
    fingerprint: str,
    blocks: list[Block],
    turn: list[int],
    reply: list[int],
    text: str,
    block: int,
) -> list[Block]:
    """The blocks a finished turn adds after `blocks`: the open turn's tokens (`turn`), the
    reply's (`reply`, as its `text` tokenizes) and the closing tokens, cut as the next request
    will cut them, minus the open turn's full blocks (already among `blocks`)."""
    tokens = turn + reply + tpl.close()
    pieces = cut(tokens, block)
    stored = len(cut(turn, block)) - 1
    parent = blocks[-1].hash if blocks else ""
    out: list[Block] = []
    for piece in pieces[stored:]:
        parent = block_address(fingerprint, parent, piece)
        if len(pieces) > 1:
            words = tpl.model.detokenize(piece)
        else:
            opening = len(tpl.special(tpl.user_open))
            closing = len(tpl.special(tpl.user_close + tpl.header))
            asked = tpl.model.detokenize(turn[opening : len(turn) - closing])
            words = f"User: {asked}\nAssistant: {text}"
        out.append(Block(parent, piece, words, len(blocks) + 1))
    return out
