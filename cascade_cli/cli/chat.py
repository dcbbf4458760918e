"""`cascade chat`: a named session in a REPL (or one message per stdin line when piped)."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from typing import Annotated, Any

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import Answer, err, out, settings, shown
from cascade_cli.cli.cite import sources_line
from cascade_cli.cli.runtime import open_context, open_model, writer_library
from cascade_cli.config import Settings
from cascade_cli.documents import collection
from cascade_cli.documents.library import Library
from cascade_cli.errors import CascadeError, StoreLockedError
from cascade_cli.session import transcripts
from cascade_cli.session.chat import ChatSession
from cascade_cli.session.exclusive import lock_session

HELP = (
    "Commands: /exit, /reset (erase this session's turns), /history, /stats, "
    "/sources (where the last reply's excerpts came from), /help. "
    'End a line with \\ to continue it; \'"""\' opens a block.'
)


def _read_message(first: str) -> str:
    """Collect a possibly multi-line message starting with `first` (interactive only)."""
    if first.strip() == '"""':
        lines: list[str] = []
        while True:
            line = input("... ")
            if line.strip() == '"""':
                return "\n".join(lines)
            lines.append(line)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        lines.append(input("... "))
    return "\n".join(lines)


def _reply(session: ChatSession, text: str) -> None:
    """Stream one reply; Ctrl-C stops it and keeps what was said."""
    stream = session.send(text)
    answer = Answer(out if sys.stdout.isatty() else err)  # piped: stdout holds answers alone
    try:
        for piece in stream:
            answer.write(piece)
    except KeyboardInterrupt:
        stream.close()
        sys.stdout.write("\n")
        err.print("[dim](reply stopped)[/dim]")
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        if session.last.gen_tokens >= session.max_tokens:
            err.print(f"[dim](reply cut at --max-tokens {session.max_tokens})[/dim]")
    session.sync()


def _history(session: ChatSession) -> None:
    rows = session.history()
    if not rows:
        out.print("[dim](no turns yet)[/dim]")
    for turn, role, text in rows:
        out.print(f"[bold]{turn:>3} {role}:[/bold] ", end="")
        out.print(text, markup=False)


def _stats(session: ChatSession) -> None:
    t, last = session.totals, session.last
    tiers = " · ".join(f"{k} {t.tiers.get(k, 0)}" for k in ("window", "ram", "disk", "recomputed"))
    s = session.s
    out.print(
        f"session {shown(s.name)}: {s.turns} turns, {s.tokens} tokens, window {session.window}"
    )
    out.print(f"chunk hits: {tiers}")
    out.print(
        f"restore: {t.restored_tokens} tokens in {t.restore_s:.3f}s · prefill: "
        f"{t.prefill_tokens} tokens in {t.prefill_s:.3f}s · generation: "
        f"{t.gen_tokens / t.gen_s if t.gen_s else 0:.1f} tok/s"
    )
    out.print(
        shown(
            f"last turn: first token {last.ttft_s:.3f}s (recall {last.recall_s * 1000:.0f} ms, "
            + (f"rerank {last.rerank_s * 1000:.0f} ms, " if last.rerank_s else "")
            + f"layout {last.layout_s * 1000:.0f} ms, prefill {last.prefill_s * 1000:.0f} ms), "
            f"recalled: {', '.join(last.recalled) or '-'}"
        )
    )
    if last.scored:  # `--rerank llm`: the note's candidates, by the generator's score
        scores = (
            f"{label} {'-' if score is None else f'{score:.3f}'}{' (quoted)' * q}"
            for label, score, q in last.scored
        )
        out.print(shown("rerank: " + " · ".join(scores)))


def _fresh_name(lib: Library, held: ExitStack) -> str:
    """A session name no session has and no other chat holds, locked for this chat (two chats
    started in the same second, or one resumed by name while this one runs, never share it)."""
    base = time.strftime("chat-%Y%m%d-%H%M%S")
    n = 1
    while True:
        name = base if n == 1 else f"{base}-{n}"
        n += 1
        with lib.disk.lock:
            if transcripts.find(lib.conn, name) is not None:
                continue
        try:
            lock = lock_session(lib.settings.disk_cache_path, name)
        except StoreLockedError:
            continue
        held.callback(lock.release)
        return name


def _resume(session: ChatSession, wrote: bool) -> bool:
    """Take the store's writer lock back for a turn: wait up to 10 s for a server's request to
    finish; after a turn another writer (an ingest) kept from saving, do not wait again. Says
    so once; returns whether this turn writes."""
    if not session.resume(10.0 if wrote else 0.5) and wrote:
        err.print("[dim](another process is writing the store: this turn's KV is not saved)[/dim]")
    return session.lib.disk.mode == "write"


def _loop(session: ChatSession, interactive: bool) -> None:
    wrote = True
    while True:
        session.idle()  # a server (or an ingest) beside this chat writes while the user types
        try:
            line = input("> ") if interactive else sys.stdin.readline()
        except EOFError:
            break
        except KeyboardInterrupt:
            out.print("\n[dim](Ctrl-D or /exit to quit)[/dim]")
            continue
        if not interactive:
            if line == "":
                break
            line = line.rstrip("\n")
        command = line.strip()
        if not command:
            continue
        if command in ("/exit", "/quit"):
            break
        if command == "/reset":
            wrote = _resume(session, wrote)
            n = session.reset()
            err.print(f"[dim](conversation reset: {n} turn(s) erased)[/dim]")
        elif command == "/history":
            _history(session)
        elif command == "/stats":
            _stats(session)
        elif command == "/sources":
            cited = sources_line(session.sources())
            out.print(shown(cited or "(no document excerpts in the last reply's window)"))
        elif command == "/help":
            out.print(HELP)
        elif command.startswith("/") and " " not in command:
            err.print(f"[yellow]unknown command {shown(command)}[/yellow] — {shown(HELP)}")
        else:
            if interactive:
                try:
                    line = _read_message(line)
                except (KeyboardInterrupt, EOFError):  # Ctrl-C or Ctrl-D mid-message
                    out.print("\n[dim](message discarded)[/dim]")
                    continue
            wrote = _resume(session, wrote)
            try:
                _reply(session, line)
            except CascadeError as exc:
                err.print(f"[yellow]error:[/yellow] {shown(exc.one_line())}")
                if not interactive:
                    raise


# `cascade chat`'s own options (those other commands share: cli/options.py)
SessionName = Annotated[
    str | None,
    typer.Option("--session", "-s", help="Create or resume this named session."),
]
System = Annotated[
    str | None,
    typer.Option("--system", help="System prompt (kept with the session; setting system)."),
]
Docs = Annotated[
    list[str] | None,
    typer.Option("--doc", help="Document or collection every turn may recall from (repeatable)."),
]
MaxTokens = Annotated[
    int | None, typer.Option("--max-tokens", help="Longest reply (setting max_tokens).", min=1)
]
Temperature = Annotated[
    float | None,
    typer.Option("--temperature", help="0 = greedy (setting temperature).", min=0.0),
]
TopK = Annotated[
    int | None, typer.Option("--top-k", help="Top-k sampling, 0 = off (setting top_k).", min=0)
]
TopP = Annotated[
    float | None, typer.Option("--top-p", help="Nucleus sampling (setting top_p).", min=0.0)
]
Seed = Annotated[int | None, typer.Option("--seed", help="Sampling seed (default: random).")]
RepeatPenalty = Annotated[
    float | None,
    typer.Option(
        "--repeat-penalty",
        help="Over the last 64 tokens, 1.0 = off (setting repeat_penalty).",
        min=0.0,
    ),
]


def chat(
    session_name: SessionName = None,
    system: System = None,
    doc: Docs = None,
    max_tokens: MaxTokens = None,
    temperature: Temperature = None,
    top_k: TopK = None,
    top_p: TopP = None,
    seed: Seed = None,
    repeat_penalty: RepeatPenalty = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    gpu_cache_size: opt.GpuCacheSize = None,
    memory_cache_size: opt.MemoryCacheSize = None,
    disk_cache_path: opt.DiskCachePath = None,
    block_size: opt.BlockSize = None,
    compression: opt.Compression = None,
    flash_attn: opt.FlashAttn = None,
    recall: opt.RecallMode = None,
    rerank: opt.Rerank = None,
    think: opt.Think = None,
    embed_model: opt.EmbedModel = None,
    repeat_guard: opt.RepeatGuard = None,
) -> None:
    """Chat in a named session, stored turn by turn.

    A session resumes without prefilling its turns again. The system prompt and
    sampling flags are kept with it; flags given later override them. Piped
    stdin: one message per line, each reply printed. Type /help in the chat.

    Example: cascade chat -s tea --doc persuasion

    See docs/commands.md."""
    flags = opt.shared(locals())
    overrides: dict[str, Any] = opt.flags(
        system=system,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        repeat_penalty=repeat_penalty,
    )
    _chat(settings(flags), session_name, doc or [], overrides)


def _chat(
    cfg: Settings, session_name: str | None, refs: list[str], overrides: dict[str, Any]
) -> None:
    """Open the model and the store, then chat in the named (or a fresh) session."""
    held = ExitStack()
    if session_name is not None:  # one chat per session, refused before the model loads
        session_name = transcripts.check_name(session_name)
        held.callback(lock_session(cfg.disk_cache_path, session_name).release)
    interactive = sys.stdin.isatty()
    with (
        held,
        open_model(cfg) as m,
        open_context(cfg, m, extra_tokens=256) as ctx,
        writer_library(
            cfg, ctx, "this chat keeps its turns' text, and their KV is recomputed next time"
        ) as lib,
    ):
        lib.recall.preload()
        with lib.disk.lock:  # no document twice (a collection and one of its files)
            found = [d for ref in refs for d in collection.documents_of(lib.conn, ref)]
        documents = list({d.id: d for d in found}.values())
        name = session_name or _fresh_name(lib, held)
        session = ChatSession(
            ctx,
            lib,
            name,
            overrides=overrides,
            documents=documents,
            notify=lambda msg: err.print(f"[dim]({shown(msg)})[/dim]"),
        )
        try:
            if interactive:
                _banner(session, name, m.path.name)
            _loop(session, interactive)
        finally:
            _close(session, name, named=bool(session_name))


def _banner(session: ChatSession, name: str, model_file: str) -> None:
    """The interactive chat's first lines: session, model, window, then the commands."""
    state = "new" if session.created else f"{session.s.turns} turns"
    out.print(
        f"[bold]cascade chat[/bold] · session {shown(name)} ({state}) · "
        f"{shown(model_file)} · "
        f"window {session.window}"
    )
    out.print(f"[dim]{HELP}[/dim]")


def _close(session: ChatSession, name: str, named: bool) -> None:
    """Close the session: say it was saved (unnamed: how to resume it), or delete it if empty."""
    session.close()
    if session.s.turns:
        hint = "" if named else f"; resume with `cascade chat --session {name}`"
        saved = shown(f"session {name}: {session.s.turns} turns saved{hint}")
        err.print(f"[dim]({saved})[/dim]")
    elif session.created and session.pages.saving:
        session.delete()  # an empty session is not kept
