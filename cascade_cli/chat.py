"""A plain-window chat: the conversation lives in one sequence of the context."""

from __future__ import annotations

from collections.abc import Generator

from cascade_cli.engine import Context, Sampler, SamplerSettings
from cascade_cli.engine.generate import Generation, generate
from cascade_cli.errors import ContextFullError

WINDOW_SEQ = 0


class ChatSession:
    """Keeps messages and the tokens already in the window; only new tokens are decoded."""

    def __init__(
        self,
        ctx: Context,
        sampling: SamplerSettings = SamplerSettings(),
        window: int | None = None,
        system: str | None = None,
        max_tokens: int = 512,
    ) -> None:
        self.ctx = ctx
        self.model = ctx.model
        self.window = min(window or ctx.n_ctx, ctx.n_ctx)
        self.sampler = Sampler(sampling)
        self.system = system
        self.max_tokens = max_tokens
        self.messages: list[tuple[str, str]] = []
        self.tokens: list[int] = []  # exactly what sits in the window, positions 0..len-1
        self.last: Generation | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (keeps the system prompt)."""
        self.ctx.seq_rm(WINDOW_SEQ)
        self.tokens = []
        self.messages = [("system", self.system)] if self.system else []
        self.sampler.reset()

    def close(self) -> None:
        self.sampler.close()

    @property
    def used(self) -> int:
        return len(self.tokens)

    def _sync(self, target: list[int]) -> None:
        """Make the window hold `target`, decoding only what differs from what is there."""
        common = 0
        for a, b in zip(self.tokens, target, strict=False):
            if a != b:
                break
            common += 1
        if common == len(target) and common:
            common -= 1  # re-decode the last token to get fresh logits
        # always: an interrupted decode may have left cells past what self.tokens records
        self.ctx.seq_rm(WINDOW_SEQ, common, -1)
        del self.tokens[common:]
        todo = target[common:]
        self.ctx.decode(todo, common, WINDOW_SEQ, logits="last")
        self.tokens.extend(todo)

    def send(self, text: str) -> Generator[str, None, None]:
        """Add a user message and stream the reply. Raises ContextFullError before decoding."""
        target = self.model.chat_tokens([*self.messages, ("user", text)])
        if len(target) >= self.window:
            raise ContextFullError(
                f"the context window is full ({len(target)} tokens needed, "
                f"window is {self.window})",
                "Use /reset to start over or raise --gpu-cache-size.",
            )
        self.messages.append(("user", text))
        try:
            self._sync(target)
        except BaseException:
            self.messages.pop()
            raise
        state = Generation(pos=len(self.tokens))
        self.last = state
        pieces: list[str] = []
        try:
            for piece in generate(
                self.ctx, self.sampler, WINDOW_SEQ, state, self.max_tokens, self.window
            ):
                pieces.append(piece)
                yield piece
        finally:
            # every sampled token except possibly the last one is in the window
            self.tokens.extend(state.tokens[: state.pos - len(self.tokens)])
            self.ctx.seq_rm(WINDOW_SEQ, len(self.tokens), -1)  # drop a half-finished decode
            self.messages.append(("assistant", "".join(pieces)))
