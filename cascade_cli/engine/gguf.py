"""Tensor names of a GGUF file, read with ggml's own gguf reader (metadata only, no weights)."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

from cascade_cli.engine.ggml_libs import library_path


class _Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


@cache
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path("ggml-base")))
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _Params]
    lib.gguf_get_n_tensors.restype = ctypes.c_int64
    lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    lib.gguf_get_tensor_name.restype = ctypes.c_char_p
    lib.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_free.restype = None
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    return lib


@cache
def tensor_names(path: Path) -> frozenset[str] | None:
    """Every tensor name in the file, or None if ggml cannot read it."""
    lib = _lib()
    handle = lib.gguf_init_from_file(str(path).encode(), _Params(True, None))
    if not handle:
        return None
    try:
        n = lib.gguf_get_n_tensors(handle)
        return frozenset(lib.gguf_get_tensor_name(handle, i).decode() for i in range(n))
    finally:
        lib.gguf_free(handle)
