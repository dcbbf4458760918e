"""Fetch a long public-domain English novel for the long-document benchmarks.

Source: Debian package ``r-cran-janeaustenr`` 1.0.0-1 (CRAN ``janeaustenr`` 1.0.0,
package code MIT; the novels themselves, by Jane Austen (d. 1817), are in the public
domain). The package stores each novel as an R character vector (one element per line)
in the lazy-load database ``data/Rdata.rdb``; this script reads that database with the
standard library only (ar + tar.xz + zlib + R's XDR serialization format) and writes
plain UTF-8 text to ``bench/data/<name>.txt``. The texts carry no Project Gutenberg
header or footer.

Usage (needs ``apt-get`` and an up-to-date package list, i.e. ``apt-get update``)::

    python bench/fetch_text.py                      # emma (default)
    python bench/fetch_text.py emma prideprejudice  # several novels
    python bench/fetch_text.py --deb /path/to/r-cran-janeaustenr_1.0.0-1_all.deb
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

PACKAGE = "r-cran-janeaustenr"
VERSION = "1.0.0-1"
DEB_NAME = f"{PACKAGE}_{VERSION}_all.deb"
DEB_SHA256 = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
DATA_DIR = "./usr/lib/R/site-library/janeaustenr/data"

# sha256 of the text this script writes (lines joined by "\n", trailing "\n").
NOVELS: dict[str, str] = {
    "emma": "7c67b5985c6d0de1efaeb5d342d52cb82c38083c40e2295129e30e87ee690ebe",
    "prideprejudice": "dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d",
    "mansfieldpark": "98bc90519cdf4ef663ad7de2734bb529435ef24f7abbde6bb1a50898871dafe9",
    "sensesensibility": "105e1651fe93bed7130078578efd31e0c557d68667ba672ddc876f735b30fe09",
    "northangerabbey": "51f91bbe0517db8e65cff009b097ce0a1836124c4e0532ac19e6c0cad982abed",
    "persuasion": "8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a",
}

OUT_DIR = Path(__file__).resolve().parent / "data"

# R SEXP types used by the serialized objects we read.
_NILVALUE_SXP = 254
_REFSXP = 255
_SYMSXP = 1
_LISTSXP = 2
_CHARSXP = 9
_LGLSXP = 10
_INTSXP = 13
_REALSXP = 14
_STRSXP = 16
_VECSXP = 19
_SPECIAL_NO_DATA = {242, 253, 251, 250, 249, 248, 247, 246, 245, 244, 243}

RObj = object


class _RReader:
    """Minimal reader for R's XDR serialization (format versions 2 and 3)."""

    def __init__(self, data: bytes) -> None:
        self.buf = data
        self.pos = 0
        self.refs: list[RObj] = []

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return int(value)

    def _bytes(self, n: int) -> bytes:
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def read(self) -> RObj:
        if self._bytes(2) != b"X\n":
            raise ValueError("not an XDR-format R serialization")
        version = self._int()
        self._int()  # writer R version
        self._int()  # minimal reader R version
        if version == 3:
            self._bytes(self._int())  # native encoding name
        return self._item()

    def _charsxp(self, flags: int = 0) -> str | None:
        length = self._int()
        if length == -1:
            return None
        raw = self._bytes(length)
        latin1 = bool((flags >> 12) & 4)  # LATIN1_MASK in the CHARSXP's gp bits
        return raw.decode("latin-1" if latin1 else "utf-8")

    def _item(self) -> RObj:
        flags = self._int()
        sxp = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if sxp == _NILVALUE_SXP or sxp in _SPECIAL_NO_DATA:
            return None
        if sxp == _REFSXP:
            index = flags >> 8
            if index == 0:
                index = self._int()
            return self.refs[index - 1]
        if sxp == _SYMSXP:
            self._int()  # flags of the CHARSXP that names the symbol
            name = self._charsxp()
            self.refs.append(name)
            return name
        if sxp == _LISTSXP:
            attr = self._item() if has_attr else None
            tag = self._item() if has_tag else None
            car = self._item()
            cdr = self._item()
            del attr
            rest = cdr if isinstance(cdr, list) else []
            return [(tag, car), *rest]
        if sxp == _CHARSXP:
            return self._charsxp(flags)
        obj: RObj
        if sxp == _STRSXP:
            count = self._int()
            strings: list[str | None] = []
            for _ in range(count):
                strings.append(self._charsxp(self._int()))
            obj = strings
        elif sxp in (_INTSXP, _LGLSXP):
            count = self._int()
            obj = list(struct.unpack_from(f">{count}i", self.buf, self.pos))
            self.pos += 4 * count
        elif sxp == _REALSXP:
            count = self._int()
            obj = list(struct.unpack_from(f">{count}d", self.buf, self.pos))
            self.pos += 8 * count
        elif sxp == _VECSXP:
            count = self._int()
            obj = [self._item() for _ in range(count)]
        else:
            raise ValueError(f"unsupported R SEXP type {sxp}")
        if has_attr:
            attrs = self._item()
            if isinstance(attrs, list) and isinstance(obj, list):
                names = dict(attrs).get("names")
                if isinstance(names, list):
                    return dict(zip(names, obj, strict=True))
        return obj


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download_deb(dest: Path) -> Path:
    subprocess.run(
        ["apt-get", "download", f"{PACKAGE}={VERSION}"],
        cwd=dest,
        check=True,
    )
    return dest / DEB_NAME


def _deb_data_members(deb: bytes) -> dict[str, bytes]:
    """Return the files of a .deb's data.tar.* archive, keyed by member path."""
    if not deb.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian ar archive")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = deb[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            out: dict[str, bytes] = {}
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        out[member.name] = handle.read()
            return out
    raise ValueError("no data.tar member in the .deb")


def _lazyload_object(rdb: bytes, offset: int, length: int) -> RObj:
    blob = rdb[offset : offset + length]
    (expected,) = struct.unpack(">I", blob[:4])
    payload = zlib.decompress(blob[4:])
    if len(payload) != expected:
        raise ValueError("lazy-load entry has an unexpected length")
    return _RReader(payload).read()


def extract_novels(deb: bytes, names: list[str]) -> dict[str, str]:
    """Return the requested novels as text (lines joined by newlines)."""
    files = _deb_data_members(deb)
    index = _RReader(gzip.decompress(files[f"{DATA_DIR}/Rdata.rdx"])).read()
    rdb = files[f"{DATA_DIR}/Rdata.rdb"]
    if not isinstance(index, dict):
        raise ValueError("unexpected Rdata.rdx layout")
    variables = index["variables"]
    if not isinstance(variables, dict):
        raise ValueError("unexpected Rdata.rdx layout")
    texts: dict[str, str] = {}
    for name in names:
        offset, length = variables[name]
        lines = _lazyload_object(rdb, offset, length)
        if not isinstance(lines, list):
            raise ValueError(f"{name} is not a character vector")
        texts[name] = "\n".join(line or "" for line in lines).strip("\n") + "\n"
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("novels", nargs="*", default=["emma"], choices=sorted(NOVELS))
    parser.add_argument("--deb", type=Path, help=f"use a local {DEB_NAME}")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        deb_path: Path = args.deb or _download_deb(Path(tmp))
        deb = deb_path.read_bytes()
    if _sha256(deb) != DEB_SHA256:
        sys.exit(f"sha256 mismatch for {deb_path}: {_sha256(deb)}")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in extract_novels(deb, args.novels).items():
        data = text.encode("utf-8")
        digest = _sha256(data)
        if NOVELS[name] and digest != NOVELS[name]:
            sys.exit(f"sha256 mismatch for {name}: {digest}")
        path = args.out_dir / f"{name}.txt"
        path.write_bytes(data)
        print(f"{path}: {len(data)} bytes, {len(text.split())} words, sha256 {digest}")


if __name__ == "__main__":
    main()
