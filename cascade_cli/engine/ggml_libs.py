"""Where the ggml shared libraries shipped with llama-cpp-python live (for kv/'s native kernels)."""

from __future__ import annotations

from pathlib import Path

from cascade_cli.engine._llama import ll


def library_dir() -> Path:
    """Directory holding libllama.so, libggml-base.so and libggml-cpu.so."""
    return Path(ll.__file__).parent / "lib"


def library_path(name: str) -> Path:
    """Full path of one ggml library, e.g. 'ggml-base' → .../libggml-base.so."""
    base = library_dir()
    for candidate in (f"lib{name}.so", f"lib{name}.dylib", f"{name}.dll"):
        path = base / candidate
        if path.exists():
            return path
    return base / f"lib{name}.so"
