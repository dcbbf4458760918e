"""The `cascade` command: global options, subcommands, and error → exit-code mapping."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Annotated

import typer

from cascade_cli import __version__
from cascade_cli.cli import ask, chat, docs, ingest, models, pull, serve, stats, verify
from cascade_cli.cli.appstate import STATE, err, shown
from cascade_cli.errors import CascadeError

app = typer.Typer(
    name="cascade",
    help="Chat with and question texts far longer than your model's context window.\n\n"
    "Ingest a text once (cascade ingest FILE), then ask about it (cascade ask NAME\n"
    "QUESTION) or chat with it (cascade chat --doc NAME).\n\n"
    'Example: cascade ask persuasion "Who is Sir Walter Elliot?"\n\n'
    "See docs/commands.md and docs/settings.md.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("ingest")(ingest.ingest_cmd)
app.command("ask")(ask.ask_cmd)
app.command("chat")(chat.chat)
app.command("serve")(serve.serve)
app.command("docs")(docs.docs)
app.command("sessions")(docs.sessions_cmd)
app.command("rm")(docs.rm)
app.add_typer(models.app, name="models")
app.command("stats")(stats.stats)
app.command("verify")(verify.verify)
app.command("pull")(pull.pull)


def _version(value: bool) -> None:
    if value:
        print(f"cascade {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and llama.cpp's log.")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Settings file (default: cascade.toml in the config dir)."),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    """Global options."""
    STATE.debug = debug
    STATE.config = config


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; CascadeError → one line on stderr and its exit code."""
    args = sys.argv[1:] if argv is None else argv
    STATE.debug = "--debug" in args
    try:
        app(args=args, prog_name="cascade")
    except CascadeError as exc:
        if STATE.debug:
            raise
        err.print(f"[red]error:[/red] {shown(exc.one_line())}", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # e.g. `cascade ask … | head`
        sys.stderr.close()
        sys.exit(0)
    except (OSError, sqlite3.Error) as exc:
        if STATE.debug:
            raise
        err.print(
            f"[red]error:[/red] I/O failed: {shown(exc)}. Check free disk space and permissions "
            "(a disk budget: --disk-cache-budget); what was stored before is intact.",
            soft_wrap=True,
        )
        sys.exit(5)
    except Exception as exc:
        if STATE.debug:
            raise
        err.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {shown(exc)} (rerun with --debug)"
        )
        sys.exit(70)
