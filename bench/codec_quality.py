"""KV codec quality and speed: python bench/codec_quality.py [--text FILE] [--chunks N].

For each scheme, every 512-token chunk of a real text is decoded at positions 0..511, saved,
encoded, decoded and restored into the SAME positions; the next 16 tokens are teacher-forced and
their next-token distributions compared with the unquantized original (KL(orig || restored)).
Also reports the noise floor (a 1e-3 relative random perturbation of K/V), bytes per token
against the raw f16 state, and encode/decode times for a 4096-token blob (numpy vs ggml).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as cascade_cli does, before numpy loads

import numpy as np  # noqa: E402

from bench.provenance import save  # noqa: E402
from cascade_cli import kv  # noqa: E402
from cascade_cli.engine import Context, Model, library_dir, set_verbose  # noqa: E402
from cascade_cli.kv import codec, sections  # noqa: E402
from cascade_cli.samples import PERSUASION  # noqa: E402

CHUNK = 512
FORCED = 16
MODEL = ROOT / ".cascade-test" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_text() -> Path:
    data = ROOT / "bench" / "data"
    found = sorted(data.glob("*.txt")) if data.is_dir() else []
    return found[0] if found else PERSUASION


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Per-row KL(ref || got) of logits."""
    lp, lq = log_softmax(ref), log_softmax(got)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


#: the model's cache layout (kv.sections): each attention section is coded on its own
LAYOUT = "kv"


def encode_spec(blob: np.ndarray, spec: codec.Spec | None, nat: bool = True) -> bytes:
    """codec.encode_spec per attention section of a LAYOUT blob."""
    if LAYOUT == "kv":
        return codec.encode_spec(blob, spec, 255, nat)
    parts = sections.split(blob, LAYOUT)
    return sections.pack(LAYOUT, [codec.encode_spec(p, spec, 255, nat) for p in parts])


def perturb(blob: np.ndarray, rel: float, seed: int = 0) -> np.ndarray:
    """A copy of blob with every K/V value scaled by (1 + rel·N(0,1))."""
    parts = [p.copy() for p in sections.split(blob, LAYOUT)]
    rng = np.random.default_rng(seed)
    for part in parts:
        parsed = kv.parse(part)
        for a in (*parsed.k, *parsed.v):
            noise = rng.standard_normal(a.shape).astype(np.float32)
            a[...] = a.astype(np.float32) * (1 + rel * noise)
    return sections.join(parts)


class Harness:
    """Saved chunks plus the reference logits of the tokens that follow each."""

    def __init__(self, model: Model, tokens: list[int], n_chunks: int, flash: str) -> None:
        self.ctx = Context(model, CHUNK + FORCED + 16, n_seq_max=1, n_threads=2, flash_attn=flash)
        step = max(CHUNK + FORCED, (len(tokens) - CHUNK - FORCED) // max(1, n_chunks))
        self.cases: list[tuple[np.ndarray, list[int], np.ndarray]] = []
        for start in range(0, len(tokens) - CHUNK - FORCED, step)[:n_chunks]:
            chunk = tokens[start : start + CHUNK]
            nxt = tokens[start + CHUNK : start + CHUNK + FORCED]
            self.ctx.clear()
            self.ctx.decode(chunk, 0, logits="none")
            blob = self.ctx.state_get(0).copy()
            ref = self.ctx.decode(nxt, CHUNK, logits="all")
            self.cases.append((blob, nxt, ref))

    def score(self, transform: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
        """Mean and max KL over all chunks and forced tokens after restoring transform(blob)."""
        kls = []
        for blob, nxt, ref in self.cases:
            self.ctx.clear()
            self.ctx.state_set(0, transform(blob))
            got = self.ctx.decode(nxt, CHUNK, logits="all")
            kls.append(kl(ref, got))
        allkl = np.concatenate(kls)
        return float(allkl.mean()), float(allkl.max())


def timed(fn: Callable[[], object], reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def big_blob(model: Model, tokens: list[int], flash: str) -> np.ndarray:
    with Context(model, 4096, n_seq_max=1, n_batch=512, n_threads=2, flash_attn=flash) as ctx:
        ctx.decode(tokens[:4096], 0, logits="none")
        return ctx.state_get(0).copy()


def speed(blob: np.ndarray, spec: codec.Spec | None) -> dict[str, float]:
    out = np.empty(blob.size, dtype=np.uint8)
    res: dict[str, float] = {}
    for name, nat in (("np", False), ("ggml", True)):
        payload = encode_spec(blob, spec, nat)

        def enc(n: bool = nat) -> object:
            return encode_spec(blob, spec, n)

        def dec(p: bytes = payload, n: bool = nat) -> object:
            return kv.decode(p, out, n)

        res[f"enc_{name}"] = timed(enc, 2)
        res[f"dec_{name}"] = timed(dec)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--flash", default="off")
    ap.add_argument("--explore", action="store_true", help="also score alternative specs")
    ap.add_argument(
        "--per-section",
        action="store_true",
        help="several-section models: also score each scheme on one section at a time",
    )
    args = ap.parse_args()
    set_verbose(False)
    kv.configure(library_dir())
    text_path = args.text or default_text()
    model = Model(args.model)
    global LAYOUT
    LAYOUT = model.cache_layout
    tokens = model.tokenize(text_path.read_text(encoding="utf-8", errors="replace"))
    print(f"model: {args.model.name} ({LAYOUT} cache)")
    print(f"text: {text_path.name} ({len(tokens)} tokens), native kernels: {kv.available()}")
    h = Harness(model, tokens, args.chunks, args.flash)
    raw = h.cases[0][0].nbytes
    print(f"{len(h.cases)} chunks of {CHUNK} tokens, {FORCED} forced tokens each\n")
    same = h.score(lambda b: b)
    floor = h.score(lambda b: perturb(b, 1e-3))
    print(f"floor: identical restore KL {same[0]:.2e}; 1e-3 relative noise KL {floor[0]:.5f}\n")
    specs: dict[str, codec.Spec | None] = {n: s for n, (_, s) in codec.SCHEMES.items()}
    if args.explore:
        specs.update(EXPLORE)
    blob4k = big_blob(model, tokens, args.flash)
    rows: list[list[object]] = []
    for name, spec in specs.items():
        payload = encode_spec(h.cases[0][0], spec)

        def roundtrip(b: np.ndarray, s: codec.Spec | None = spec) -> np.ndarray:
            return kv.decode(encode_spec(b, s))

        mean, mx = h.score(roundtrip)
        zl = len(zlib.compress(payload, 6)) / raw
        sp = speed(blob4k, spec) if name in codec.SCHEMES else None
        fmt = f"{spec.k_fmt}/{spec.v_fmt} f{spec.flags}" if spec else "f16"
        enc = f"{sp['enc_np']:.0f} / {sp['enc_ggml']:.0f}" if sp else "-"
        dec = f"{sp['dec_np']:.0f} / {sp['dec_ggml']:.0f}" if sp else "-"
        rows.append([name, fmt, f"{mean:.4f}", f"{mx:.3f}", f"{len(payload) / raw:.3f}",
                     f"{zl:.3f}", enc, dec, TARGETS.get(name, "")])  # fmt: skip
        print(rows[-1], flush=True)
    save(
        f"codec-{args.model.stem}" + ("-explore" if args.explore else ""),
        topic="codec",
        title=f"KV codec quality and size ({args.model.name}, {LAYOUT} cache)",
        columns=["scheme", "K / V format", "mean KL", "max KL", "bytes/token vs f16", "with zlib",
                 "encode ms numpy / ggml", "decode ms numpy / ggml", "target"],
        rows=rows,
        models=[args.model],
        notes=f"{len(h.cases)} chunks of {CHUNK} tokens of {text_path.name}, {FORCED} "
        f"teacher-forced tokens each: KL(original ‖ restored) of the next-token distributions. "
        f"Noise floor (1e-3 relative perturbation of K/V): KL {floor[0]:.5f}. Encode/decode "
        f"times for one 4096-token state.",
    )  # fmt: skip
    if args.per_section and LAYOUT != "kv":
        per_section(h)


def per_section(h: Harness) -> None:
    """KL of each shipped scheme applied to one attention section, the others kept exact."""
    kinds = sections.LAYOUTS[LAYOUT]
    print("\n| scheme | " + " | ".join(f"only section {i + 1}" for i in range(len(kinds))) + " |")
    print("|---|" + "---|" * len(kinds))
    for name in ("q8", "q4"):
        spec = codec.SCHEMES[name][1]
        row = []
        for only in range(len(kinds)):

            def one(b: np.ndarray, only: int = only, spec: codec.Spec | None = spec) -> np.ndarray:
                parts = sections.split(b, LAYOUT)
                parts[only] = codec.decode(codec.encode_spec(parts[only], spec))
                return sections.join(parts)

            mean, mx = h.score(one)
            row.append(f"{mean:.4f} (max {mx:.3f})")
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)


#: What each shipped scheme must reach (mean KL, bytes per token against f16).
TARGETS = {"q8": "KL ≤ 0.003, ≤ 0.57×", "q4": "KL ≤ 0.01, ≤ 0.32×", "q2": "KL ≤ 0.10, ≤ 0.22×"}

R, RV, C = codec.ROT_K, codec.ROT_V, codec.CENTER_K
EXPLORE: dict[str, codec.Spec | None] = {
    "q8 plain": codec.Spec("q8_0", "q8_0"),
    "q4 q4_1/q4_0 rotV": codec.Spec("q4_1", "q4_0", RV),
    "q2 rotV center": codec.Spec("q3_K", "q2_K", RV | C),
    "q2 2K/2K": codec.Spec("q2_K", "q2_K", R | RV | C),
}

if __name__ == "__main__":
    main()
