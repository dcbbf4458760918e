"""The only package that imports llama_cpp: models, contexts, batches, sampling, KV ops."""

from cascade_cli.engine._llama import llama_version, set_verbose
from cascade_cli.engine.context import Batch, Context, resolve_flash_attn
from cascade_cli.engine.generate import TokenStream, generate
from cascade_cli.engine.ggml_libs import library_dir, library_path
from cascade_cli.engine.model import GGML_TYPE_F16, GGML_TYPE_Q8_0, Model, file_identity
from cascade_cli.engine.sampler import Sampler, SamplerSettings

__all__ = [
    "GGML_TYPE_F16",
    "GGML_TYPE_Q8_0",
    "Batch",
    "Context",
    "Model",
    "Sampler",
    "SamplerSettings",
    "TokenStream",
    "file_identity",
    "generate",
    "library_dir",
    "library_path",
    "llama_version",
    "resolve_flash_attn",
    "set_verbose",
]
