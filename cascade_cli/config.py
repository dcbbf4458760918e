"""Settings, resolved as defaults < TOML file < CASCADE_* environment < command-line flags."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from cascade_cli.errors import ConfigError

COMPRESSIONS = ("none", "q8", "q4", "q2")
FLASH_ATTN = ("auto", "on", "off")
RECALL = ("hybrid", "bm25", "semantic")
#: Repetition guards (engine.sampler.GUARDS): DRY, stop on a loop, off.
REPEAT_GUARDS = ("dry", "stop", "off")
#: The quote's passage rerank for ask, chat and serve (recall.rerank.RERANKS): the generator's
#: query likelihood, or off.
RERANKS = ("llm", "off")
#: Whether a reasoning model thinks before it answers (engine.reasoning; off: it answers at once)
THINK = ("off", "on")
#: Quote policies (recall.select): 'agree' — the best hit, when every recall method ranked it
#: first; 'best' — the best hit, when any method ranked it first; 'tops' — each method's first
#: hit; 'off'.
QUOTES = ("agree", "best", "tops", "off")
#: Where `ask` puts its quote (window.ask): in the question's message ('lines') or in a system
#: note of its own before it ('system', as chat does).
ASK_NOTES = ("lines", "system")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}


def home() -> Path | None:
    """CASCADE_HOME, which overrides every path, or None."""
    value = os.environ.get("CASCADE_HOME")
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    """Where models and the store live."""
    root = home()
    return root if root else Path(platformdirs.user_data_dir("cascade", appauthor=False))


def config_dir() -> Path:
    """Where cascade.toml is looked for."""
    root = home()
    return root if root else Path(platformdirs.user_config_dir("cascade", appauthor=False))


def models_dir() -> Path:
    """Where pulled models are kept."""
    return data_dir() / "models"


def parse_size(value: object, name: str = "size") -> int:
    """Parse a byte size such as 512MiB, 2GB or 1048576."""
    if isinstance(value, bool):
        raise ConfigError(f"invalid {name}: {value!r}", "Use a size like 512MiB or 2GB.")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        match = re.fullmatch(r"\s*(-?[0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
        if not match:
            raise ConfigError(f"invalid {name}: {value!r}", "Use a size like 512MiB or 2GB.")
        number, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _UNITS:
        raise ConfigError(
            f"invalid {name}: unknown unit in {value!r}", "Use B, KiB, MiB, GiB, KB, MB or GB."
        )
    if number < 0:
        raise ConfigError(f"invalid {name}: {value!r} is negative", "Use a size of 0 or more.")
    return int(number * _UNITS[unit])


def parse_int(value: object, name: str, minimum: int) -> int:
    """Parse an integer setting with a lower bound; accepts 4k-style suffixes."""
    if isinstance(value, bool):
        raise ConfigError(f"invalid {name}: {value!r}", f"Use a whole number ≥ {minimum}.")
    text = str(value).strip().lower()
    scale = 1
    if text.endswith("k"):
        text, scale = text[:-1], 1024
    try:
        number = int(text) * scale
    except ValueError:
        raise ConfigError(
            f"invalid {name}: {value!r}", f"Use a whole number ≥ {minimum}."
        ) from None
    if number < minimum:
        raise ConfigError(
            f"invalid {name}: {value!r} is below {minimum}", f"Use {minimum} or more."
        )
    return number


@dataclass(frozen=True)
class Settings:
    """Every setting cascade reads. Field names are the TOML keys; the string under each field
    is its one-line description in docs/settings.md (scripts/reference.py)."""

    model: str = "qwen2.5-coder-0.5b"
    """The model: a registry name (`cascade models list`) or a path to a .gguf file."""
    gpu_layers: int = -1
    """Layers offloaded to the GPU (-1 = all, 0 = CPU only)."""
    threads: int = 0
    """CPU threads (0 = every core)."""
    gpu_cache_size: int = 4096
    """The live context window, in tokens (accepts 4k = 4096)."""
    memory_cache_size: int = 512 * 1024**2
    """The RAM tier's budget, in bytes (accepts 512MiB, 2GB)."""
    disk_cache_path: Path = dataclasses.field(default_factory=lambda: data_dir() / "store")
    """The directory of the on-disk KV store (the disk tier)."""
    disk_cache_budget: int = 0
    """Cap on the disk tier, in bytes (0 = none); finished documents' chunks go first."""
    block_size: int = 512
    """Tokens per KV chunk, the paging unit."""
    compression: str = "q4"
    """How the disk tier quantizes KV chunks (COMPRESSIONS)."""
    flash_attn: str = "auto"
    """llama.cpp's flash attention (FLASH_ATTN)."""
    recall: str = "hybrid"
    """How chunks are recalled: BM25 and embeddings together, or one of them (RECALL)."""
    embed_model: str = "minilm-l6"
    """The sentence-embedding model recall uses: a registry name, a .gguf path or none."""
    repeat_guard: str = "dry"
    """What keeps ask, chat and serve replies from looping (REPEAT_GUARDS)."""
    rerank: str = "off"
    """Which recalled passage is quoted: the generator's choice, or the quote policy (RERANKS)."""
    think: str = "off"
    """Whether a reasoning model thinks before it answers (THINK)."""
    system: str = "You are a helpful assistant."
    """The system prompt of a new chat session and of the server's conversations."""
    temperature: float = 0.7
    """Sampling temperature of chat replies and of served requests that send none (0 = greedy)."""
    top_k: int = 40
    """Chat and serve: sample from the k likeliest tokens (0 = off)."""
    top_p: float = 0.95
    """Chat and serve: nucleus sampling's probability mass (1 = off)."""
    repeat_penalty: float = 1.0
    """Chat, ask and serve: penalty on tokens repeated in the last 64 (1 = off: it garbles
    numbers with repeated digits, 4417 → 44…)."""
    max_tokens: int = 512
    """Longest chat reply, and a served request's when it sends no max_tokens."""
    ask_tokens: int = 256
    """Longest `ask` answer."""
    ask_cue: str = "Answer: "
    """`ask`: the words its answer follows, after the reply header ("" = none)."""
    ask_note: str = "lines"
    """`ask`: the quote in the question's message, or in a system note before it (ASK_NOTES;
    a model whose cells cannot be copied or whose template has no system role keeps 'lines')."""
    ask_temperature: float = 0.0
    """`ask`'s sampling temperature (0 = greedy: an answer quotes the document)."""
    quote: str = "best"
    """Which recalled passage is quoted again right before the question (QUOTES)."""
    neighbors: int = 1
    """`ask`: chunks added beyond a hit whose best passage touches its chunk's edge."""
    allow_origins: tuple[str, ...] = ()
    """`cascade serve`: web page origins allowed beside loopback ones (scheme://host[:port])."""
    max_body_size: int = 4 * 1024**2
    """`cascade serve`: the largest request body, in bytes (over it: 413)."""
    max_messages: int = 1024
    """`cascade serve`: the most messages in one request."""
    max_queue: int = 16
    """`cascade serve`: the most requests waiting behind the running one (over it: 429)."""
    max_reply_tokens: int = 4096
    """`cascade serve`: the highest max_tokens a request may ask."""
    api_cache_budget: int = 2 * 1024**3
    """`cascade serve`: disk its stored conversations may take, in bytes (0 = no limit)."""
    remote_cache_url: str = dataclasses.field(default="", repr=False)
    """The shared tier below disk: redis://[user:password@]host:port/db, rediss:// for TLS ("" =
    none). Never printed as is (store.remote.redact)."""
    remote_cache_ttl: int = 0
    """Seconds a published chunk lives in Redis (0 = until evicted)."""

    @property
    def n_threads(self) -> int:
        """Threads to use: the setting, or every core when 0."""
        return self.threads if self.threads > 0 else max(1, os.cpu_count() or 1)


_FIELDS = {f.name for f in dataclasses.fields(Settings)}


_TEXT = (
    "model",
    "disk_cache_path",
    "compression",
    "flash_attn",
    "remote_cache_url",
    "repeat_guard",
    "rerank",
    "think",
    "system",
    "ask_cue",
    "ask_note",
    "quote",
)


#: An allowed origin: scheme://host[:port], `*` standing for any part (`*` alone: any origin).
_ORIGIN = re.compile(r"\*|[a-z][a-z0-9+.-]*://[^/\s?#]+", re.IGNORECASE)


def parse_origins(value: object) -> tuple[str, ...]:
    """Allowed origins from a list or a comma-separated string, each checked."""
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    out: list[str] = []
    for item in items:
        text = str(item).strip().rstrip("/")
        if not text:
            continue
        if not _ORIGIN.fullmatch(text):
            raise ConfigError(
                f"invalid allow_origins entry {item!r}",
                "Give an origin as scheme://host[:port], e.g. http://app.example:3000 "
                "(`*` matches any part).",
            )
        out.append(text.lower())
    return tuple(out)


def parse_float(value: object, name: str, low: float, high: float = float("inf")) -> float:
    """Parse a number setting within [low, high]."""
    span = f"from {low:g} to {high:g}" if high != float("inf") else f"of {low:g} or more"
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"invalid {name}: {value!r}", f"Use a number {span}.") from None
    if not low <= number <= high:
        raise ConfigError(f"invalid {name}: {value!r} is out of range", f"Use a number {span}.")
    return number


#: Number settings and their ranges.
_FLOATS = {
    "temperature": (0.0, 2.0),
    "ask_temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "repeat_penalty": (0.0, 10.0),
}
#: Whole-number settings and their lower bounds.
_INTS = {
    "max_messages": 1, "max_queue": 1, "max_reply_tokens": 1, "gpu_cache_size": 64,
    "block_size": 16, "threads": 0, "gpu_layers": -1, "remote_cache_ttl": 0, "top_k": 0,
    "max_tokens": 1, "ask_tokens": 1, "neighbors": 0,
}  # fmt: skip


#: Settings that take one of a few words, and those words.
_CHOICES = {
    "ask_note": ASK_NOTES, "quote": QUOTES, "compression": COMPRESSIONS, "recall": RECALL,
    "repeat_guard": REPEAT_GUARDS, "rerank": RERANKS,
}  # fmt: skip


def _coerce(key: str, value: Any) -> Any:
    if key in _FLOATS:
        return parse_float(value, key, *_FLOATS[key])
    if key in _INTS:
        return parse_int(value, key, _INTS[key])
    if key in ("system", "ask_cue"):
        return str(value)
    if key in _CHOICES:
        text = str(value).lower()
        if text not in _CHOICES[key]:
            raise ConfigError(
                f"unknown {key} {value!r}", f"Use one of: {', '.join(_CHOICES[key])}."
            )
        return text
    if key in ("memory_cache_size", "disk_cache_budget", "max_body_size", "api_cache_budget"):
        size = parse_size(value, key)
        if key == "max_body_size" and size < 1024:
            raise ConfigError(f"invalid {key}: {value!r} is below 1KiB", "Use 1KiB or more.")
        return size
    if key == "allow_origins":
        return parse_origins(value)
    if key == "flash_attn":
        text = str(value).lower()
        if text not in FLASH_ATTN:
            raise ConfigError(f"invalid flash_attn {value!r}", "Use auto, on or off.")
        return text
    if key == "think":
        text = str(value).lower()
        if text not in THINK:
            raise ConfigError(f"invalid think {value!r}", "Use on or off.")
        return text
    if key == "embed_model":
        text = str(value).strip()
        if not text:
            raise ConfigError(
                "empty embed_model setting", "Name a registered embedding model, a .gguf, or none."
            )
        return text
    if key == "disk_cache_path":
        return Path(str(value)).expanduser()
    if key == "remote_cache_url":
        from cascade_cli.store.remote import check_url  # (the tier is loaded only when used)

        return check_url(str(value)) if str(value).strip() else ""
    if key == "model":
        text = str(value).strip()
        if not text:
            raise ConfigError("empty model setting", "Name a registered model or a .gguf path.")
        return text
    raise ConfigError(f"unknown setting {key!r}", f"Known settings: {', '.join(sorted(_FIELDS))}.")


def default_config_file() -> Path:
    """The config file read when --config is not given."""
    return config_dir() / "cascade.toml"


def read_toml(path: Path) -> dict[str, Any]:
    """Read a config file; a missing default file is an empty config."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist", "Check the --config path."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read config file {path}: {exc}",
            "Fix its permissions or pass another --config.",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not valid TOML ({exc})", "Fix the file's syntax."
        ) from None
    section = data.get("cascade", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [cascade] must be a table", "Fix the file.")
    return dict(section)


def resolve(
    flags: dict[str, Any] | None = None,
    config_file: Path | None = None,
    model_defaults: Callable[[str], Mapping[str, Any]] | None = None,
) -> Settings:
    """Build Settings from the built-in defaults, the model's own defaults (`model_defaults`
    of the model the other layers name: registry.model_defaults), the TOML file, CASCADE_*
    env, then flags (None = unset), each layer over the one before."""
    values: dict[str, Any] = {}
    path = config_file if config_file is not None else default_config_file()
    if config_file is not None or path.exists():
        for key, value in read_toml(path).items():
            if key in _TEXT and not isinstance(value, str):  # TOML knows types; flags are text
                raise ConfigError(
                    f"config file {path}: {key} = {value!r} is a {type(value).__name__}",
                    f'Write it as a string, e.g. {key} = "…".',
                )
            values[key] = _coerce(key, value)
    for key in _FIELDS:
        env = os.environ.get(f"CASCADE_{key.upper()}")
        if env is not None and env != "":
            values[key] = _coerce(key, env)
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = _coerce(key, value)
    if model_defaults is not None:
        own = model_defaults(values.get("model", Settings.model))
        values = {**{k: _coerce(k, v) for k, v in own.items()}, **values}
    return Settings(**values)
