"""Make the answers benchmark's non-fiction texts from what this Debian machine ships.

python bench/manuals.py [sed coreutils pystdlib]

- ``sed``: the GNU sed manual (``/usr/share/info/sed.info.gz``, Debian's sed) — a tuning text.
- ``coreutils``: the GNU coreutils manual (``/usr/share/info/coreutils.info.gz``) — a reference
  work, held out.
- ``pystdlib``: ``pydoc`` of Python standard-library modules (subprocess, shutil, zipfile,
  tarfile, argparse) with this interpreter — code documentation, held out.

Info files lose their node separators and ``File: … Node: …`` headers; the text is otherwise as
shipped. Each file goes to ``bench/data/<name>.txt``; its sha256 is printed (the result files
name the text they ran on).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data"
INFO = {"sed": "/usr/share/info/sed.info.gz", "coreutils": "/usr/share/info/coreutils.info.gz"}
MODULES = ["subprocess", "shutil", "zipfile", "tarfile", "argparse"]


def info_text(path: str) -> str:
    raw = gzip.decompress(Path(path).read_bytes()).decode("utf-8")
    lines = [
        line for line in raw.replace("\x1f", "").splitlines()
        if not line.startswith(("File: ", "Tag Table:", "End Tag Table", "Node: "))
    ]  # fmt: skip
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def pydoc_text(modules: list[str]) -> str:
    parts = []
    for name in modules:
        out = subprocess.run(
            [sys.executable, "-m", "pydoc", name], capture_output=True, text=True, check=True,
            env={"PAGER": "cat", "MANPAGER": "cat", "PATH": "/usr/bin:/bin"},
        ).stdout  # fmt: skip
        parts.append(re.sub(r".\x08", "", out))  # no overstrike bold
    return "\n\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", default=["sed", "coreutils", "pystdlib"])
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    for name in args.names:
        text = pydoc_text(MODULES) if name == "pystdlib" else info_text(INFO[name])
        path = OUT / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode()).hexdigest()
        print(f"{path}: {len(text):,} characters, sha256 {digest}")


if __name__ == "__main__":
    main()
