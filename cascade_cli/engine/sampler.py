"""A llama.cpp sampler chain: greedy, or temperature with top-k/top-p and a seed."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from cascade_cli.engine._llama import init_penalties, ll
from cascade_cli.engine.context import Context
from cascade_cli.errors import EngineError


@dataclass(frozen=True)
class SamplerSettings:
    """temperature 0 means greedy."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    seed: int = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
    repeat_penalty: float = 1.1  # over the last 64 tokens; 1.0 = off


class Sampler:
    """Owns a llama_sampler chain; close() frees it and every sampler added to it."""

    def __init__(self, settings: SamplerSettings = SamplerSettings()) -> None:
        self.settings = settings
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if not chain:
            raise EngineError("could not create a sampler chain")
        self._h: ll.llama_sampler_p | None = chain
        if settings.repeat_penalty != 1.0:
            ll.llama_sampler_chain_add(chain, init_penalties(64, settings.repeat_penalty))
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
