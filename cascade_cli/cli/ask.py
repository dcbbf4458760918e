"""`cascade ask DOC QUESTION`: page the relevant chunks in and stream the answer."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Annotated

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import Answer, err, out, settings, shown
from cascade_cli.cli.cite import sources_line
from cascade_cli.cli.lookup import require_document
from cascade_cli.cli.runtime import embed_path, open_context, open_model
from cascade_cli.config import Settings
from cascade_cli.documents import collection, manifests
from cascade_cli.documents.catalog import Document
from cascade_cli.documents.library import Library
from cascade_cli.engine import SamplerSettings
from cascade_cli.errors import InputError, NotFoundError, check_name
from cascade_cli.store.index import INDEX
from cascade_cli.window.ask import AskResult, ask

# `cascade ask`'s own options (those other commands share: cli/options.py)
Doc = Annotated[str, typer.Argument(help="Ingested document or collection name, or a file's path.")]
More = Annotated[
    list[str] | None,
    typer.Option("--doc", help="Another document or collection to ask too (repeatable)."),
]
TopK = Annotated[
    int,
    typer.Option(
        "--top-k",
        help="Most distinct hits to page in (0 = as many as fit the window).",
        min=0,
    ),
]
Neighbors = Annotated[
    int | None,
    typer.Option(
        "--neighbors",
        help="Chunks added beyond a hit whose best passage touches its chunk's edge "
        "(setting neighbors, default 1).",
        min=0,
    ),
]
Quote = Annotated[
    str | None,
    typer.Option(
        "--quote",
        help="Passage quoted again before the question: best (the best hit's, if any "
        "method ranks it first), agree (if all do), tops (each method's first), off "
        "(setting quote, default best).",
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", help="Longest answer (setting ask_tokens, default 256).", min=1),
]
Temperature = Annotated[
    float | None,
    typer.Option("--temperature", help="0 = greedy (setting ask_temperature, default 0).", min=0.0),
]
RepeatPenalty = Annotated[
    float | None,
    typer.Option(
        "--repeat-penalty",
        help="Penalty on tokens repeated in the last 64; 1.0 = off (a penalty garbles "
        "numbers with repeated digits; setting repeat_penalty).",
        min=0.0,
    ),
]


def ask_cmd(
    doc: Doc,
    question: Annotated[str, typer.Argument(help="The question.")],
    more: More = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    top_k: TopK = 0,
    neighbors: Neighbors = None,
    quote: Quote = None,
    max_tokens: MaxTokens = None,
    temperature: Temperature = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed.")] = None,
    repeat_penalty: RepeatPenalty = None,
    rerank: opt.Rerank = None,
    think: opt.Think = None,
    repeat_guard: opt.RepeatGuard = None,
    recall: opt.RecallMode = None,
    embed_model: opt.EmbedModel = None,
    gpu_cache_size: opt.GpuCacheSize = None,
    memory_cache_size: opt.MemoryCacheSize = None,
    disk_cache_path: opt.DiskCachePath = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    flash_attn: opt.FlashAttn = None,
    remote: opt.Remote = None,
) -> None:
    """Answer a question about an ingested document.

    Recalls the chunks likely to hold the answer, pages them into the window and
    streams the answer. With --remote, also a document another machine published:
    its chunks are paged in from Redis, nothing is prefilled.

    Example: cascade ask persuasion "Who is Sir Walter Elliot?"

    See docs/commands.md."""
    if not question.strip():
        raise InputError("the question is empty", "Ask something.")
    own = opt.flags(quote=quote, neighbors=neighbors, remote_cache_url=remote)
    own |= opt.flags(ask_tokens=max_tokens, ask_temperature=temperature)
    cfg = settings(opt.shared(locals()) | own | opt.flags(repeat_penalty=repeat_penalty))
    _answer(cfg, doc, more or [], question, top_k=top_k, seed=seed, as_json=as_json)


def _answer(
    cfg: Settings,
    doc: str,
    more: list[str],
    question: str,
    *,
    top_k: int,
    seed: int | None,
    as_json: bool,
) -> None:
    """Page the documents' relevant chunks in, stream the answer, then print its summary."""
    sampling = _sampling(cfg, seed)
    if not cfg.remote_cache_url:
        for ref in [doc, *more]:
            require_document(cfg, ref)  # before the model loads
    # a reader beside a writer; a new home asking a published document creates its store
    fresh = cfg.remote_cache_url and not (cfg.disk_cache_path / INDEX).exists()
    with (
        open_model(cfg) as m,
        # laid out once in position order, never slid: sliding-window layers need only the
        # cells a decode still sees (swa_full off: 3.4x less KV memory at 16k on Gemma 3)
        open_context(cfg, m, extra_tokens=cfg.block_size + 256, swa_full=False) as ctx,
        Library(cfg, ctx, mode="write" if fresh else "shared", embed_path=embed_path(cfg)) as lib,
    ):
        lib.recall.preload()
        documents = _documents(lib, [doc, *more])
        result = AskResult(doc=doc if len(documents) > 1 else documents[0].name)
        stream = ask(
            ctx,
            lib,
            documents,
            question,
            result,
            window=cfg.gpu_cache_size,
            mode=cfg.recall,
            top_k=top_k,
            neighbors=cfg.neighbors,
            quote=cfg.quote,
            rerank=cfg.rerank,
            max_tokens=cfg.ask_tokens,
            cue=cfg.ask_cue,
            where=cfg.ask_note,
            sampling=sampling,
            notice=lambda text: err.print(f"[dim]{shown(text)}[/dim]"),
        )
        shown_answer = Answer(err)  # thinking to stderr: stdout holds the answer alone
        for piece in stream:
            if not as_json:
                shown_answer.write(piece)
    if as_json:
        _print_json(result)
    else:
        _print_summary(result)


def _sampling(cfg: Settings, seed: int | None) -> SamplerSettings:
    """The answer's sampler settings (no --seed: a random one)."""
    return SamplerSettings(
        temperature=cfg.ask_temperature,
        seed=0xFFFFFFFF if seed is None else seed,
        repeat_penalty=cfg.repeat_penalty,
        guard=cfg.repeat_guard,
    )


def _print_json(result: AskResult) -> None:
    """The result as one JSON object, its answer first."""
    data = asdict(result)
    out.print_json(json.dumps({"answer": data.pop("answer"), **data}))


def _print_summary(result: AskResult) -> None:
    """End the streamed answer's line; its sources and timings dimmed on stderr."""
    sys.stdout.write("\n")
    if result.sources:
        err.print(f"[dim]{shown(sources_line(result.sources))}[/dim]")
    t = result.timings
    n = len(result.chunks)
    fed = [c for c in result.chunks if c["tier"] == "prefill"]
    by = f", {len(fed)} of them by prefill" if fed else ""
    err.print(
        f"[dim]{n} chunk{'s' if n != 1 else ''}{by} "
        f"({t['restored_tokens']} tokens restored) in "
        f"{t['restore_s']:.2f}s · first token {t['ttft_s']:.2f}s · {t['tokens_per_s']:.1f} tok/s[/dim]"
    )


def _documents(lib: Library, refs: list[str]) -> list[Document]:
    """The documents the refs name (a collection's files; no document twice). A name the store
    lacks may be one another machine published (with --remote): pulled into the catalog."""
    found: dict[int, Document] = {}
    for ref in refs:
        try:
            docs = collection.documents_of(lib.conn, ref)
        except NotFoundError:
            if lib.remote is None:
                raise
            # published by another machine: its name becomes a catalog row here
            docs = [manifests.pull(lib, check_name(ref, "document", "cascade ask manual '…'"))]
        found.update((d.id, d) for d in docs)
    return list(found.values())
