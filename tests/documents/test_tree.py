"""documents.tree: which files of a folder become a collection's documents, and why others do
not — .gitignore files (nested, negated), .git and dependency folders, links, FIFOs, size, binary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cascade_cli.documents.tree import walk
from cascade_cli.errors import InputError


def _write(root: Path, rel: str, data: bytes | str = "text\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _names(root: Path, max_bytes: int = 1 << 20) -> tuple[list[str], dict[str, list[str]]]:
    found = walk(root, max_bytes)
    return [rel for _, rel in found.files], found.skipped


def test_gitignore_files_decide_deepest_first_and_negate(tmp_path: Path) -> None:
    _write(tmp_path, ".gitignore", "*.log\nsecret/\n/top.txt\n")
    _write(tmp_path, "app.log")
    _write(tmp_path, "top.txt")
    _write(tmp_path, "src/top.txt")  # `/top.txt` is anchored at the root
    _write(tmp_path, "secret/key.txt")
    _write(tmp_path, "src/.gitignore", "!keep.log\ngen_*\n")
    _write(tmp_path, "src/keep.log")
    _write(tmp_path, "src/gen_table.py")
    _write(tmp_path, "src/main.py")
    _write(tmp_path, ".git/info/exclude", "notes.md\n")
    _write(tmp_path, "notes.md")
    files, skipped = _names(tmp_path)
    assert files == [".gitignore", "src/.gitignore", "src/keep.log", "src/main.py", "src/top.txt"]
    assert sorted(skipped["ignored"]) == [
        "app.log", "notes.md", "secret/", "src/gen_table.py", "top.txt"
    ]  # fmt: skip


def test_vcs_dependency_and_build_folders_are_not_walked(tmp_path: Path) -> None:
    for rel in (".git/config", "node_modules/x/index.js", "__pycache__/a.pyc", ".venv/lib/a.py",
                "build/out.txt", "target/debug/a.rs"):  # fmt: skip
        _write(tmp_path, rel)
    _write(tmp_path, "lib/a.py")
    files, skipped = _names(tmp_path)
    assert files == ["lib/a.py"] and not skipped


def test_links_loops_fifos_size_and_binary_are_skipped_with_a_reason(tmp_path: Path) -> None:
    outside = _write(tmp_path / "elsewhere", "secret.txt")
    root = tmp_path / "tree"
    _write(root, "a.txt")
    (root / "loop").symlink_to(root)  # a link to a folder: never followed
    (root / "out.txt").symlink_to(outside)  # a link out of the tree
    (root / "in.txt").symlink_to(root / "a.txt")  # a link inside it: read
    (root / "dangling.txt").symlink_to(root / "nowhere")
    os.mkfifo(root / "pipe")
    _write(root, "big.txt", "x" * 2048)
    _write(root, "blob.bin", b"\x7fELF\x00\x01")
    _write(root, "paper.pdf", b"%PDF-1.4\n\x00binary body")  # binary, but a format we read
    files, skipped = _names(root, max_bytes=1024)
    assert files == ["a.txt", "in.txt", "paper.pdf"]
    assert skipped == {
        "symlink": ["loop"], "outside": ["out.txt"], "unreadable": ["dangling.txt"],
        "special": ["pipe"], "too large": ["big.txt"], "binary": ["blob.bin"],
    }  # fmt: skip
    assert walk(root, 1024).summary() == (
        "skipped 1 binary, 1 too large, 1 unreadable, 1 special, 1 outside, 1 symlink"
    )


def test_empty_files_and_names_no_one_can_read_are_skipped(tmp_path: Path) -> None:
    _write(tmp_path, "a.txt")
    _write(tmp_path, "__init__.py", b"")
    os.close(os.open(os.fsencode(tmp_path) + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY))
    _write(tmp_path, "esc\x1b[31m.txt")
    files, skipped = _names(tmp_path)
    assert files == ["a.txt"]
    assert skipped == {"empty": ["__init__.py"], "name": ["bad\\udcff.txt", "esc\x1b[31m.txt"]}


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a directory"):
        walk(_write(tmp_path, "a.txt"))


def test_a_link_reads_only_what_the_walk_takes_itself(tmp_path: Path) -> None:
    """A link inside the tree to an ignored file, or into `.git`, would read what the walk
    refused: it is skipped as ignored."""
    _write(tmp_path, ".gitignore", "secret.env\n")
    _write(tmp_path, "secret.env", "TOKEN=1\n")
    _write(tmp_path, ".git/config", "[remote]\nurl = https://user:pw@example.com\n")
    _write(tmp_path, "a.txt")
    (tmp_path / "env.txt").symlink_to(tmp_path / "secret.env")
    (tmp_path / "config.txt").symlink_to(tmp_path / ".git" / "config")
    (tmp_path / "b.txt").symlink_to(tmp_path / "a.txt")
    files, skipped = _names(tmp_path)
    assert files == [".gitignore", "a.txt", "b.txt"]
    assert sorted(skipped["ignored"]) == ["config.txt", "env.txt", "secret.env"]


def test_ignore_files_above_a_folder_of_a_repository_apply(tmp_path: Path) -> None:
    """`ingest repo/docs` honours repo/.gitignore and the repository's info/exclude, as Git
    does for that folder; a folder in no repository has only its own."""
    repo = tmp_path / "repo"
    _write(repo, ".gitignore", "*.log\n/docs/draft.md\n")
    _write(repo, ".git/info/exclude", "local.txt\n")
    _write(repo, "docs/.gitignore", "!keep.log\n")
    for rel in ("docs/a.md", "docs/run.log", "docs/keep.log", "docs/draft.md", "docs/local.txt",
                "docs/sub/draft.md"):  # fmt: skip
        _write(repo, rel)
    files, skipped = _names(repo / "docs")
    assert files == [".gitignore", "a.md", "keep.log", "sub/draft.md"]
    assert sorted(skipped["ignored"]) == ["draft.md", "local.txt", "run.log"]
    _write(tmp_path, "plain/run.log")
    assert _names(tmp_path / "plain")[0] == ["run.log"]
    _write(repo, "build-cache/data/x.log")  # a folder the rules above ignore, named anyway:
    _write(repo, ".gitignore", "*.log\n/docs/draft.md\nbuild-cache/\n")
    assert _names(repo / "build-cache" / "data")[0] == ["x.log"]  # read as it is


def test_a_whitespace_only_file_is_empty(tmp_path: Path) -> None:
    _write(tmp_path, "a.txt")
    _write(tmp_path, "blank.txt", "\n  \n\t\n")
    files, skipped = _names(tmp_path)
    assert files == ["a.txt"] and skipped == {"empty": ["blank.txt"]}


def test_a_file_swapped_for_a_fifo_after_the_walk_is_refused_without_blocking(
    tmp_path: Path,
) -> None:
    """Between the walk and the read a file can become a FIFO: reading it the usual way would
    wait for a writer forever."""
    from cascade_cli.documents import extract

    path = _write(tmp_path, "a.txt")
    assert _names(tmp_path)[0] == ["a.txt"]
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match="is not a regular file"):
        extract(path)
