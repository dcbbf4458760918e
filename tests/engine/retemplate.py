"""A copy of a GGUF with another chat template (the weights and every other key as they are):
the default model dressed as a reasoning model's template, to test what cascade does with one
without a hub download."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, GGUFWriter

#: Qwen3's way of writing past reasoning (ChatML turns, `<think>` blocks): llama.cpp renders it
#: as ChatML, cascade reads the format from the `</think>` in it.
THINK = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n</think>\n\n"
    "{% endif %}{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _value(f: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    kind = f.types[0]
    if kind == GGUFValueType.ARRAY:
        sub = f.types[1]
        vals = (
            [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
            if sub == GGUFValueType.STRING
            else [f.parts[i][0].item() for i in f.data]
        )
        return vals, kind, sub
    if kind == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8"), kind, None
    return f.parts[f.data[0]][0].item(), kind, None


def retemplate(src: Path, dst: Path, template: str) -> Path:
    """Write `src` with `tokenizer.chat_template` set to `template` at `dst` (once)."""
    if dst.exists():
        return dst
    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    part = dst.with_suffix(".part")
    w = GGUFWriter(str(part), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "tokenizer.chat_template"):
            continue
        value, kind, sub = _value(f)
        w.add_key_value(name, value, kind, sub_type=sub)
    w.add_chat_template(template)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.n_bytes, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()
    part.rename(dst)
    return dst
