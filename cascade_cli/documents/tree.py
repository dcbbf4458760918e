"""Which files of a directory tree become documents of a collection, and which are skipped, why.

`walk(root)` lists the regular files under `root` that a person would call the tree's text:
it honours every `.gitignore` in the tree, and where `root` is a folder inside a Git working
tree those of the folders above it up to the repository's top (and its `.git/info/exclude`),
with pathspec's Git matcher, the deeper file deciding first as Git does; skips `.git` and the
usual build and dependency folders; never follows a symbolic link to a directory (so a link
loop cannot trap it), nor a link to a file outside the tree or to one the walk does not take
itself (an ignored file, a file in `.git`); and skips FIFOs, sockets and devices, files past a
size limit, binary files (NUL bytes in their first 8 KiB, unless PDF or EPUB), files with
nothing but whitespace ("empty") and files it cannot read. Nothing here reads more than a
file's first bytes; a file swapped for a FIFO after the walk is refused when it is read
(documents.reading.open_file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from cascade_cli.documents.formats import sniff
from cascade_cli.errors import InputError

#: Folders never walked into: version control, dependencies, builds, caches, virtualenvs.
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".bzr", "node_modules", "bower_components", "__pycache__",
    ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".cache", ".gradle", ".idea", ".vscode", "build", "dist", "target", "out",
    ".eggs", ".next", ".nuxt", ".terraform", "vendor", "Pods", "DerivedData",
})  # fmt: skip
#: The largest file a collection takes by default (`--max-file-size`).
MAX_FILE = 16 << 20
#: Bytes looked at to tell a binary file.
SNIFF = 8192
#: Reasons a file is skipped, in the order the summary names them.
REASONS = (
    "ignored", "binary", "too large", "empty", "unreadable", "special", "outside", "symlink",
    "name",
)  # fmt: skip


@dataclass
class Walk:
    """The files to ingest (absolute path, path relative to the root in POSIX form), sorted by
    relative path, and the skipped ones by reason."""

    files: list[tuple[Path, str]] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, rel: str) -> None:
        self.skipped.setdefault(reason, []).append(rel)

    def summary(self) -> str:
        """`skipped 12 binary, 3 ignored, 1 too large` ('' when nothing was skipped); folders
        skipped whole (`.git`, `node_modules`, …) are not counted."""
        parts = [f"{len(self.skipped[r])} {r}" for r in REASONS if self.skipped.get(r)]
        return f"skipped {', '.join(parts)}" if parts else ""


@dataclass
class _Rules:
    """The ignore files that apply in one folder: (folder relative to the root, the root's path
    relative to an ignore file's folder above the root — '' for one inside it —, matcher)."""

    specs: list[tuple[str, str, pathspec.PathSpec]]

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for base, lead, spec in reversed(self.specs):  # the deepest .gitignore decides first
            sub = rel[len(base) + 1 :] if base else rel
            sub = f"{lead}/{sub}" if lead else sub
            res = spec.check_file(sub + "/" if is_dir else sub)
            if res.include is not None:
                return bool(res.include)
        return False


def _spec(path: Path) -> pathspec.PathSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def walk(root: Path, max_bytes: int = MAX_FILE, exclude: Iterable[Path] = ()) -> Walk:
    """The tree's files and skips (see the module's docstring); an InputError when `root` is
    not a readable directory. Folders in `exclude` (the store itself) are never walked."""
    if not root.is_dir():
        raise InputError(f"{root} is not a directory", "Pass a folder, or a file to ingest.")
    top = root.resolve()
    out = Walk()
    skip = {p.resolve() for p in exclude}
    links: list[tuple[str, str]] = []  # (link, its target), both relative to the root
    for folder, rules, files in _folders(top, _Rules(_above(top)), out, skip):
        for name in files:
            rel = f"{folder}/{name}" if folder else name
            if not _printable(rel):  # not UTF-8, or control characters: a name no one can see
                out.skip("name", rel.encode("utf-8", "backslashreplace").decode())
                continue
            if rules.ignored(rel, False):
                out.skip("ignored", rel)
                continue
            reason = _check(top, top / rel, max_bytes)
            if reason:
                out.skip(reason, rel)
            elif os.path.islink(top / rel):
                links.append((rel, (top / rel).resolve().relative_to(top).as_posix()))
            else:
                out.files.append((top / rel, rel))
    taken = {rel for _, rel in out.files}
    for rel, target in links:  # a link reads only what the walk takes itself
        if target in taken:
            out.files.append((top / rel, rel))
        else:
            out.skip("ignored", rel)
    out.files.sort(key=lambda f: f[1])
    return out


def _above(top: Path) -> list[tuple[str, str, pathspec.PathSpec]]:
    """The ignore rules from above `top`: where it is inside a Git working tree, the
    `.git/info/exclude` of its repository and the `.gitignore` of each folder from the
    repository's top down to `top`'s parent (`top`'s own is read by the walk) — none where
    they ignore `top` itself (a folder a person names is what they want read, e.g. a
    virtualenv's site-packages)."""
    repo = next((p for p in (top, *top.parents) if (p / ".git").exists()), None)
    if repo is None:
        return []
    out = []
    exclude = _spec(repo / ".git" / "info" / "exclude")
    lead = top.relative_to(repo).as_posix()
    lead = "" if lead == "." else lead
    if exclude is not None:
        out.append(("", lead, exclude))
    for folder in reversed(top.parents):
        if folder == repo or folder.is_relative_to(repo):
            spec = _spec(folder / ".gitignore")
            if spec is not None:
                out.append(("", top.relative_to(folder).as_posix(), spec))
    for _, path, spec in out:  # `top` itself ignored: chosen anyway, its rules say nothing
        parts = path.split("/") if path else []
        if any(spec.match_file("/".join(parts[: i + 1]) + "/") for i in range(len(parts))):
            return []
    return out


def _folders(
    top: Path, rules: _Rules, out: Walk, skip: set[Path]
) -> Iterator[tuple[str, _Rules, list[str]]]:
    """(folder relative to `top`, its rules, its file names) for every folder walked."""

    def failed(exc: OSError) -> None:
        name = Path(exc.filename or "").resolve()
        rel = name.relative_to(top).as_posix() if name.is_relative_to(top) else str(name)
        out.skip("unreadable", rel)

    found: dict[str, _Rules] = {"": rules}
    for path, dirs, files in os.walk(top, topdown=True, onerror=failed, followlinks=False):
        folder = Path(path).relative_to(top).as_posix()
        folder = "" if folder == "." else folder
        here = found.pop(folder)
        if ".gitignore" in files:
            spec = _spec(Path(path) / ".gitignore")
            if spec is not None:
                here = _Rules([*here.specs, (folder, "", spec)])
        keep = []
        for d in sorted(dirs):
            rel = f"{folder}/{d}" if folder else d
            if d in SKIP_DIRS or Path(path, d) in skip:
                continue
            if not _printable(rel):
                out.skip("name", rel.encode("utf-8", "backslashreplace").decode() + "/")
                continue
            if os.path.islink(os.path.join(path, d)):
                out.skip("symlink", rel)  # never followed: no loops, nothing outside
            elif here.ignored(rel, True):
                out.skip("ignored", rel + "/")
            else:
                keep.append(d)
                found[rel] = here
        dirs[:] = keep
        yield folder, here, sorted(files)


def _printable(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.walk's surrogate escapes of undecodable bytes
        return False
    return rel.isprintable()


def _check(top: Path, path: Path, max_bytes: int) -> str:
    """Why `path` is skipped, or ''."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            real = path.resolve(strict=True)
            if not real.is_relative_to(top):
                return "outside"
            st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            return "special"  # a FIFO, socket or device: reading it could block forever
        if st.st_size > max_bytes:
            return "too large"
        if st.st_size == 0:
            return "empty"
        with path.open("rb") as fh:
            first = fh.read(SNIFF)
    except (OSError, RuntimeError):  # gone, no permission, a link loop
        return "unreadable"
    if st.st_size <= SNIFF and not first.strip():
        return "empty"  # whitespace only: nothing to read
    if b"\x00" in first:
        try:
            if sniff(path, first) in ("pdf", "epub"):
                return ""
        except InputError:
            pass
        return "binary"
    return ""
