"""Option types shared by commands (each setting is also a flag)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

Model = Annotated[
    str | None, typer.Option("--model", "-m", help="Registered model name or path to a .gguf file.")
]
GpuLayers = Annotated[
    str | None,
    typer.Option("--gpu-layers", help="Layers to offload to the GPU (-1 = all, 0 = CPU only)."),
]
Threads = Annotated[str | None, typer.Option("--threads", help="CPU threads (0 = all cores).")]
GpuCacheSize = Annotated[
    str | None,
    typer.Option("--gpu-cache-size", help="Live context window, in tokens (e.g. 4096 or 4k)."),
]
MemoryCacheSize = Annotated[
    str | None,
    typer.Option("--memory-cache-size", help="RAM tier budget in bytes (e.g. 512MiB, 2GB)."),
]
DiskCachePath = Annotated[
    Path | None, typer.Option("--disk-cache-path", help="Directory of the on-disk KV store.")
]
BlockSize = Annotated[
    str | None, typer.Option("--block-size", help="Tokens per KV chunk (paging unit).")
]
Compression = Annotated[
    str | None,
    typer.Option("--compression", help="Disk-tier KV quantization: none, q8, q4 or q2."),
]
FlashAttn = Annotated[
    str | None, typer.Option("--flash-attn", help="Flash attention: auto, on or off.")
]


def flags(**values: Any) -> dict[str, Any]:
    """Drop unset flags so lower layers (env, file, defaults) apply."""
    return {k: v for k, v in values.items() if v is not None}


#: The shared options (this module's) whose parameter is named as the setting it sets.
SETTINGS = (
    "model", "gpu_layers", "threads", "gpu_cache_size", "memory_cache_size", "disk_cache_path",
    "disk_cache_budget", "block_size", "compression", "flash_attn", "recall", "rerank", "think",
    "embed_model", "repeat_guard",
)  # fmt: skip


def shared(values: Mapping[str, Any]) -> dict[str, Any]:
    """The set ones of a command's shared options, from its parameters (`locals()`)."""
    return flags(**{k: values[k] for k in SETTINGS if k in values})


DiskCacheBudget = Annotated[
    str | None,
    typer.Option("--disk-cache-budget", help="Cap on the disk tier (0 = none), e.g. 20GB."),
]


RecallMode = Annotated[
    str | None,
    typer.Option(
        "--recall", help="How chunks are recalled: hybrid (BM25 + embeddings), bm25 or semantic."
    ),
]
Rerank = Annotated[
    str | None,
    typer.Option(
        "--rerank",
        help="Passage quoted before the question: llm (the generator's pick among the top "
        "hits) or off (the quote policy). Default: off.",
    ),
]
Think = Annotated[
    str | None,
    typer.Option(
        "--think",
        help="Let a reasoning model (Qwen3, gpt-oss, …) think before it answers: on or off "
        "(other models ignore it). Default: off.",
    ),
]
EmbedModel = Annotated[
    str | None,
    typer.Option(
        "--embed-model", help="Sentence-embedding model for recall (registry name, .gguf, none)."
    ),
]


Remote = Annotated[
    str | None,
    typer.Option(
        "--remote",
        help="Shared remote tier below disk: redis://host:port/db, or "
        "redis://user:password@host:port/db, or rediss://… for TLS.",
    ),
]


RepeatGuard = Annotated[
    str | None,
    typer.Option(
        "--repeat-guard",
        help="Keep replies from looping: dry (llama.cpp's DRY sampler; a loop that forms "
        "anyway ends the reply), stop (end it once 3 words repeat 3 times), off. Default: dry.",
    ),
]
