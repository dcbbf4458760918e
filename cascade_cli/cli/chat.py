"""`cascade chat`: an interactive REPL (or one message per stdin line when piped)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cascade_cli.chat import ChatSession
from cascade_cli.cli import options as opt
from cascade_cli.cli.runtime import open_context, open_model
from cascade_cli.cli.state import err, out, settings
from cascade_cli.engine import SamplerSettings
from cascade_cli.errors import ContextFullError

HELP = 'Commands: /exit, /reset, /help. End a line with \\ to continue it; \'"""\' opens a block.'


def _read_message(first: str) -> str | None:
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


def _reply(session: ChatSession, text: str, interactive: bool) -> bool:
    """Stream one reply; False when the window was full."""
    try:
        stream = session.send(text)
        try:
            for piece in stream:
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            stream.close()
            sys.stdout.write("\n")
            err.print("[dim](reply stopped)[/dim]")
            return True
        sys.stdout.write("\n")
        sys.stdout.flush()
    except ContextFullError as exc:
        err.print(f"[yellow]context full:[/yellow] {exc.one_line()}")
        return False
    if session.last is not None and session.last.stopped_by == "context_full":
        err.print(
            "[yellow]context full:[/yellow] the reply was cut off because the window is full. "
            "Use /reset to start over or raise --gpu-cache-size."
        )
        return False
    return True


def chat(
    system: Annotated[
        str | None, typer.Option("--system", help="System prompt for the conversation.")
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Longest reply.", min=1)] = 512,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy.", min=0.0)] = 0.7,
    top_k: Annotated[int, typer.Option("--top-k", help="Top-k sampling (0 = off).", min=0)] = 40,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling.", min=0.0)] = 0.95,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed.")] = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    gpu_cache_size: opt.GpuCacheSize = None,
    flash_attn: opt.FlashAttn = None,
) -> None:
    """Chat with the model. Piped stdin: one message per line, each reply printed."""
    cfg = settings(
        opt.flags(
            model=model,
            gpu_layers=gpu_layers,
            threads=threads,
            gpu_cache_size=gpu_cache_size,
            flash_attn=flash_attn,
        )
    )
    sampling = SamplerSettings(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=0xFFFFFFFF if seed is None else seed,
    )
    interactive = sys.stdin.isatty()
    full = False
    with open_model(cfg) as m, open_context(cfg, m) as ctx:
        session = ChatSession(
            ctx, sampling, window=cfg.gpu_cache_size, system=system, max_tokens=max_tokens
        )
        try:
            if interactive:
                out.print(
                    f"[bold]cascade chat[/bold] · {m.path.name} · window {cfg.gpu_cache_size}"
                )
                out.print(f"[dim]{HELP}[/dim]")
            while True:
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
                    session.reset()
                    err.print("[dim](conversation reset)[/dim]")
                    continue
                if command == "/help":
                    out.print(HELP)
                    continue
                text = _read_message(line) if interactive else line
                if text is None:
                    continue
                full = not _reply(session, text, interactive) or full
        finally:
            session.close()
    if full and not interactive:
        raise typer.Exit(ContextFullError.exit_code)
