"""A llama.cpp sampler chain: greedy, or temperature with top-k/top-p and a seed; optionally
a repetition guard (DRY) in front."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from cascade_cli.engine._llama import init_dry, init_penalties, ll
from cascade_cli.engine.context import Context
from cascade_cli.engine.model import Model
from cascade_cli.errors import EngineError

#: Repetition guards: 'dry' — llama.cpp's DRY sampler (and 'stop' behind it); 'stop' — end the
#: reply once an n-gram of 3 words repeats 3 times (engine.loops); 'off'.
GUARDS = ("dry", "stop", "off")
#: DRY (p-e-w): a token that would extend a repeat of the reply's own earlier tokens longer than
#: DRY_ALLOWED loses DRY_MULTIPLIER × DRY_BASE^(length − DRY_ALLOWED) of its logit. It sees only
#: the tokens it sampled (never the prompt), so quoting the document is free; a repeat never
#: runs across a breaker, and every digit is one, so numbers are never penalised (the reason
#: the repeat penalty is off: it turned pass key 86387 into 86392).
DRY_MULTIPLIER = 3.0
DRY_BASE = 1.75
DRY_ALLOWED = 3
DRY_LAST_N = 512
DRY_BREAKERS = ("\n", '"', "*", *"0123456789")


@dataclass(frozen=True)
class SamplerSettings:
    """temperature 0 means greedy."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    seed: int = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
    repeat_penalty: float = 1.1  # over the last 64 tokens; 1.0 = off
    guard: str = "off"  # one of GUARDS


class Sampler:
    """Owns a llama_sampler chain; close() frees it and every sampler added to it."""

    def __init__(
        self, settings: SamplerSettings = SamplerSettings(), model: Model | None = None
    ) -> None:
        self.settings = settings
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if not chain:
            raise EngineError("could not create a sampler chain")
        self._h: ll.llama_sampler_p | None = chain
        if settings.guard == "dry":
            if model is None:
                raise EngineError("the DRY repetition guard needs the model's vocabulary")
            ll.llama_sampler_chain_add(chain, _dry(model))
        if settings.repeat_penalty != 1.0:
            vocab = model.n_vocab if model is not None else 0
            penalty = init_penalties(64, settings.repeat_penalty, n_vocab=vocab)
            ll.llama_sampler_chain_add(chain, penalty)
        if settings.temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            if settings.top_k > 0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(settings.top_k))
            if 0 < settings.top_p < 1:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(settings.top_p, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(settings.temperature))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(settings.seed))

    def sample(self, ctx: Context, row: int = -1) -> int:
        """Pick the next token from the logits of batch row `row` of ctx's last decode."""
        if self._h is None:
            raise EngineError("sampler used after close")
        return int(ll.llama_sampler_sample(self._h, ctx.handle, row))

    def reset(self) -> None:
        if self._h is not None:
            ll.llama_sampler_reset(self._h)

    def close(self) -> None:
        if self._h is not None:
            ll.llama_sampler_free(self._h)
            self._h = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_protos: dict[tuple[str, int], Any] = {}
_protos_lock = threading.Lock()


def _dry(model: Model) -> Any:
    """A DRY sampler for `model`'s vocabulary: a clone of one made once per model file (making
    one reads every token's text once per breaker; a clone copies the result)."""
    key = (str(model.path), model.n_vocab)
    with _protos_lock:
        proto = _protos.get(key)
        if proto is None:
            proto = init_dry(
                model.vocab, DRY_MULTIPLIER, DRY_BASE, DRY_ALLOWED, DRY_LAST_N, DRY_BREAKERS
            )
            if not proto:
                raise EngineError("could not create the DRY sampler")
            _protos[key] = proto
    return ll.llama_sampler_clone(proto)
