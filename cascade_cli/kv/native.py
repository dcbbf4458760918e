"""ggml's SIMD quantization kernels through ctypes (GIL released), with a numpy fallback.

kv/ never imports the engine: engine-aware code calls `configure(lib_dir)` with the directory
holding libggml-base / libggml-cpu (cascade_cli.engine.library_dir()). Until then — or if the
libraries cannot be loaded — every function here uses the numpy reference in kv.quant.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cascade_cli.kv import quant

F32 = npt.NDArray[np.float32]
F16 = npt.NDArray[np.float16]
U8 = npt.NDArray[np.uint8]

_vp = ctypes.c_void_p
_i64 = ctypes.c_int64


class Kernels:
    """Loaded ggml entry points."""

    def __init__(self, base: Path, cpu: Path | None) -> None:
        self.base = ctypes.CDLL(str(base))
        b = self.base
        b.ggml_quantize_chunk.argtypes = [ctypes.c_int, _vp, _vp, _i64, _i64, _i64, _vp]
        b.ggml_quantize_chunk.restype = ctypes.c_size_t
        b.ggml_quantize_init.argtypes = [ctypes.c_int]
        b.ggml_quantize_init.restype = None
        self.dequant: dict[str, Any] = {}
        for name in quant.FORMATS:
            fn = getattr(b, f"dequantize_row_{name}")
            fn.argtypes = [_vp, _vp, _i64]
            fn.restype = None
            self.dequant[name] = fn
        for fmt in quant.FORMATS.values():
            b.ggml_quantize_init(fmt.ggml_type)
        self.to_f16 = b.ggml_fp32_to_fp16_row
        self.to_f32 = b.ggml_fp16_to_fp32_row
        if cpu is not None and cpu.exists():
            c = ctypes.CDLL(str(cpu))
            self.to_f16 = c.ggml_cpu_fp32_to_fp16
            self.to_f32 = c.ggml_cpu_fp16_to_fp32
        for fn in (self.to_f16, self.to_f32):
            fn.argtypes = [_vp, _vp, _i64]
            fn.restype = None


_kernels: Kernels | None = None
_lock = threading.Lock()


def configure(lib: Path | str | None) -> bool:
    """Load ggml from a directory (or a libggml-base path); None disables. True if loaded."""
    global _kernels
    with _lock:
        if lib is None:
            _kernels = None
            return False
        path = Path(lib)
        base = path if path.is_file() else _find(path, "ggml-base")
        cpu = _find(base.parent, "ggml-cpu") if base is not None else None
        try:
            _kernels = Kernels(base, cpu) if base is not None else None
        except (OSError, AttributeError):
            _kernels = None
        return _kernels is not None


def _find(directory: Path, name: str) -> Path | None:
    for candidate in (f"lib{name}.so", f"lib{name}.dylib", f"{name}.dll"):
        if (directory / candidate).exists():
            return directory / candidate
    return None


def available() -> bool:
    """True when the ggml kernels are loaded."""
    return _kernels is not None


def _ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def quantize(fmt: str, x: F32, native: bool = True) -> U8:
    """Quantize flat f32 `x` (length a multiple of the block) into fmt's blocks."""
    k = _kernels
    if not native or k is None:
        return quant.quantize(fmt, x)
    f = quant.FORMATS[fmt]
    src = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(f.size(src.size), dtype=np.uint8)
    nrows = src.size // f.block
    if nrows:
        k.base.ggml_quantize_chunk(f.ggml_type, _ptr(src), _ptr(out), 0, nrows, f.block, None)
    return out


def dequantize(fmt: str, data: U8, out: F32 | None = None, native: bool = True) -> F32:
    """Dequantize fmt blocks to f32 (into `out`, contiguous, if given)."""
    f = quant.FORMATS[fmt]
    n = data.size // f.nbytes * f.block
    k = _kernels
    if not native or k is None:
        res = quant.dequantize(fmt, data)
        if out is None:
            return res
        out[...] = res.reshape(out.shape)
        return out
    if out is None:
        out = np.empty(n, dtype=np.float32)
    src = np.ascontiguousarray(data)
    if n:
        k.dequant[fmt](_ptr(src), _ptr(out), n)
    return out


def to_f16(src: F32, dst: F16, native: bool = True) -> None:
    """dst[...] = src as f16 (both contiguous and the same size for the native path)."""
    k = _kernels
    ok = src.flags.c_contiguous and dst.flags.c_contiguous and src.dtype == np.float32
    if not native or k is None or not ok or src.size != dst.size:
        dst[...] = src
        return
    k.to_f16(_ptr(src), _ptr(dst), src.size)


def to_f32(src: F16, native: bool = True) -> F32:
    """A new contiguous f32 copy of f16 `src`."""
    k = _kernels
    if not native or k is None or not src.flags.c_contiguous:
        return np.asarray(src, dtype=np.float32)
    out = np.empty(src.shape, dtype=np.float32)
    k.to_f32(_ptr(src), _ptr(out), src.size)
    return out
