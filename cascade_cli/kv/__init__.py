"""KV cache chunk codec: parse llama.cpp state blobs, quantize them, rebuild them in place.

Pure numpy plus optional ggml kernels via ctypes (see kv.native.configure); no file I/O and no
llama_cpp import. Payload format: see kv.codec.
"""

from cascade_cli.kv.blob import BlobHeader, KVBlob, blob_size, header, parse, serialize
from cascade_cli.kv.codec import SCHEMES, Spec, encode_spec
from cascade_cli.kv.native import available, configure
from cascade_cli.kv.payload import decode, decoded_size, encode, info, layout_of

__all__ = [
    "SCHEMES",
    "BlobHeader",
    "KVBlob",
    "Spec",
    "available",
    "blob_size",
    "configure",
    "decode",
    "decoded_size",
    "encode",
    "encode_spec",
    "header",
    "info",
    "layout_of",
    "parse",
    "serialize",
]
