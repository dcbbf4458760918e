"""`cascade serve`: the OpenAI-compatible HTTP server (see cascade_cli/server)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import signal
import socket
import sys
from contextlib import ExitStack
from typing import Annotated, Any

import typer

from cascade_cli.cli import options as opt
from cascade_cli.cli.appstate import STATE, err, settings, shown
from cascade_cli.cli.runtime import open_context, open_model, writer_library
from cascade_cli.config import Settings
from cascade_cli.errors import ConfigError

#: Seconds a shutdown waits for open responses (stopped at their next token) to end.
GRACE_S = 3
#: Room past the window for the service's scratch work (as `chat` has).
EXTRA_TOKENS = 256


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (uvicorn listens on it), or a one-line error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(
            f"--host {host!r} is not an address of this machine ({exc})",
            "Use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or a local address.",
        ) from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use",
                "Stop what listens there, or pick another with --port (0 = any free port).",
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc})",
            "Use another --host or --port (ports below 1024 need privileges).",
        ) from None
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _is_loopback(sock: socket.socket) -> bool:
    return ipaddress.ip_address(sock.getsockname()[0]).is_loopback


def _open_backend(cfg: Settings, system: str | None, stack: ExitStack) -> Any:
    """Model, context, store and prompt service, opened on the worker thread that uses them."""
    from cascade_cli.prompts.completions import PromptService
    from cascade_cli.server import Backend
    from cascade_cli.server.counters import recorder

    model = stack.enter_context(open_model(cfg))
    ctx = stack.enter_context(open_context(cfg, model, extra_tokens=EXTRA_TOKENS))
    beside = "until it finishes, the server reuses what is stored but saves no new KV"
    lib = stack.enter_context(writer_library(cfg, ctx, beside))
    note = lib.prefill_notice()
    if note:
        err.print(f"[dim]({shown(note)})[/dim]")
    service = PromptService(ctx, lib, window=cfg.gpu_cache_size, system=system)
    stack.callback(service.close)
    return Backend(service, recorder(lib.disk), idle=service.idle)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _ignore(signum: int, frame: object) -> None:
    """After uvicorn's graceful stop it re-raises the signal it caught: already handled."""


def _logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s cascade serve: %(message)s", "%H:%M:%S"))
    log = logging.getLogger("cascade.serve")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if debug else logging.INFO)
    log.propagate = False


async def _run(server: Any, sock: socket.socket, ready: str) -> None:
    """Serve until a signal; print `ready` once the socket accepts connections."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        print(ready, flush=True)
    await task


# `cascade serve`'s own options (those other commands share: cli/options.py)
Host = Annotated[
    str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")
]
Port = Annotated[
    int, typer.Option("--port", help="Port to listen on (0 = any free port).", min=0, max=65535)
]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", help="Require `Authorization: Bearer KEY` on /v1 and /health."),
]
System = Annotated[
    str | None,
    typer.Option(
        "--system",
        help="System prompt for requests that send none (default: You are a helpful assistant.).",
    ),
]
AllowOrigin = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-origin",
        help="A web page origin (scheme://host[:port], `*` = any part) that may call the "
        "server beside loopback ones (repeatable).",
    ),
]
MaxBodySize = Annotated[
    str | None,
    typer.Option("--max-body-size", help="Largest request body (default 4MiB); over: 413."),
]
MaxMessages = Annotated[
    str | None,
    typer.Option("--max-messages", help="Most messages in one request (default 1024)."),
]
MaxQueue = Annotated[
    str | None,
    typer.Option(
        "--max-queue", help="Most requests waiting behind the running one (default 16); 429."
    ),
]
MaxReplyTokens = Annotated[
    str | None,
    typer.Option("--max-reply-tokens", help="Highest max_tokens a request may ask (4096)."),
]
ApiCacheBudget = Annotated[
    str | None,
    typer.Option(
        "--api-cache-budget",
        help="Disk the stored conversations may take (default 2GiB; 0 = no limit); least "
        "recently used go first.",
    ),
]


def serve(
    host: Host = "127.0.0.1",
    port: Port = 8080,
    api_key: ApiKey = None,
    system: System = None,
    allow_origin: AllowOrigin = None,
    max_body_size: MaxBodySize = None,
    max_messages: MaxMessages = None,
    max_queue: MaxQueue = None,
    max_reply_tokens: MaxReplyTokens = None,
    api_cache_budget: ApiCacheBudget = None,
    model: opt.Model = None,
    gpu_layers: opt.GpuLayers = None,
    threads: opt.Threads = None,
    gpu_cache_size: opt.GpuCacheSize = None,
    memory_cache_size: opt.MemoryCacheSize = None,
    disk_cache_path: opt.DiskCachePath = None,
    disk_cache_budget: opt.DiskCacheBudget = None,
    block_size: opt.BlockSize = None,
    compression: opt.Compression = None,
    flash_attn: opt.FlashAttn = None,
    recall: opt.RecallMode = None,
    rerank: opt.Rerank = None,
    think: opt.Think = None,
    embed_model: opt.EmbedModel = None,
    repeat_guard: opt.RepeatGuard = None,
    remote: opt.Remote = None,
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API.

    Endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health. The
    prompt cache lives in the store. Requests are answered one at a time, in
    arrival order; Ctrl-C or SIGTERM stops it.

    Example: cascade serve --port 8080 --api-key KEY

    See docs/commands.md."""
    flags = opt.shared(locals())
    # the server's own flags, then --remote (in the order they are checked)
    flags |= opt.flags(allow_origins=allow_origin or None, max_body_size=max_body_size)
    flags |= opt.flags(max_messages=max_messages, max_queue=max_queue)
    flags |= opt.flags(max_reply_tokens=max_reply_tokens, api_cache_budget=api_cache_budget)
    flags |= opt.flags(remote_cache_url=remote)
    _serve(settings(flags), host, port, api_key, system)


def _api_key(api_key: str | None) -> str | None:
    """The --api-key stripped (a key pasted with a newline or spaces still matches)."""
    if api_key is not None:
        api_key = api_key.strip()
        if not api_key:
            raise ConfigError("--api-key is empty", "Give a key, or leave the flag out.")
    return api_key


def _serve(cfg: Settings, host: str, port: int, api_key: str | None, system: str | None) -> None:
    """Load the model on a worker thread and serve on host:port until Ctrl-C or SIGTERM."""
    api_key = _api_key(api_key)
    import uvicorn

    from cascade_cli.server import Worker, create_app
    from cascade_cli.server.limits import Limits
    from cascade_cli.server.policy import Policy

    _logging(STATE.debug)
    signal.signal(signal.SIGTERM, _interrupt)  # while loading: stop like Ctrl-C
    sock = _bind(host, port)
    worker = Worker(lambda stack: _open_backend(cfg, system, stack))
    try:
        if not _is_loopback(sock) and api_key is None:
            err.print(
                f"[yellow]warning:[/yellow] listening on {host} without --api-key: anyone who "
                "can reach this port can use the model."
            )
        worker.start()
        limits = Limits(cfg.max_body_size, cfg.max_messages, cfg.max_queue, cfg.max_reply_tokens)
        policy = Policy(cfg.allow_origins, check_host=_is_loopback(sock))
        app = create_app(worker, cfg.model, api_key, limits, policy)
        config = uvicorn.Config(
            app,
            log_level="info" if STATE.debug else "warning",
            access_log=STATE.debug,
            timeout_graceful_shutdown=GRACE_S,
            lifespan="off",
        )
        server = _server(config, app.state.api)
        url = _url(sock)
        ready = (
            f"cascade serve: {url}/v1 · model {cfg.model} · window {cfg.gpu_cache_size} "
            "(Ctrl-C stops)"
        )
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _ignore)  # uvicorn handles both while it serves
        asyncio.run(_run(server, sock, ready))
    finally:
        sock.close()
        worker.stop()
    err.print("[dim](server stopped; store flushed)[/dim]")


def _server(config: Any, api: Any) -> Any:
    """A uvicorn server whose shutdown first ends the open replies."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            api.stop_all()  # open replies end now (normally; a prompt mid-decode: 503)
            await super().shutdown(sockets)

    return Server(config)
