"""Memory of the live window with and without `swa_full`, for sliding-window models.

python bench/swa_memory.py [--model FILE] [--windows 4096 16384]

Each configuration runs in a fresh child process: the model is loaded, then a context of the
window (plus cascade's usual scratch sequences) is created; the resident-set growth of creating
the context (llama.cpp clears its KV buffers, so they are resident) is reported beside the KV
bytes llama.cpp allocates by its own rule (base layers: the whole window; SWA layers: the whole
window with swa_full, else n_swa × n_seq_max + n_ubatch cells, padded to 256). The table goes
to bench/results/swa-memory-<model>-<windows>.json (bench/provenance.py); needs no earlier run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.provenance import save  # noqa: E402

MODEL = ROOT / ".cascade-test" / "models" / "gemma-3-270m-q4_k_m.gguf"
N_SEQ = 4  # cascade's contexts: window, scratch and two spare sequences
N_BATCH = 512


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(model_path: str, window: int, swa_full: bool) -> dict[str, float]:
    from cascade_cli import kv
    from cascade_cli.engine import Context, Model, set_verbose
    from cascade_cli.kv import sections

    set_verbose(False)
    model = Model(Path(model_path))
    before = rss()
    with Context(model, window, N_SEQ, N_BATCH, 1, "off", swa_full=swa_full) as ctx:
        grown = rss() - before
        n_swa = model.n_swa
        kv_token = 2 * 2 * model.n_embd_k_gqa  # K and V, f16 (k == v widths here)
        ctx.decode(model.tokenize("a")[:1], 0, 0, logits="none")
        parts = sections.split(ctx.state_get(0), ctx.layout)
        n_base = kv.header(parts[0]).n_layer  # the full-attention layers
        n_layer = sum(kv.header(p).n_layer for p in parts)
    swa_cells = window if (swa_full or not n_swa) else min(window, n_swa * N_SEQ + N_BATCH)
    swa_cells = -(-swa_cells // 256) * 256
    expected = kv_token * (n_base * window + (n_layer - n_base) * swa_cells)
    return {
        "rss_mib": grown / 2**20,
        "kv_mib": expected / 2**20,
        "n_swa": n_swa,
        "base_layers": n_base,
        "layers": n_layer,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--windows", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        path, window, full = args.child
        print(json.dumps(child(path, int(window), full == "1")))
        return
    print(f"model {args.model.name}")
    print(
        "| window | swa_full | layers (full-attention) | KV allocated (llama.cpp's rule) MiB | RSS growth MiB |"
    )
    print("|---|---|---|---|---|")
    rows: list[list[object]] = []
    n_swa = 0
    for window in args.windows:
        for full in (True, False):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(args.model), str(window), str(int(full))],
                capture_output=True,
                text=True,
                check=True,
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"| {window} | {'on' if full else 'off'} | {res['layers']} ({res['base_layers']}) "
                f"| {res['kv_mib']:.1f} | {res['rss_mib']:.1f} |",
                flush=True,
            )
            rows.append([window, "on (ingest, chat, serve)" if full else "off (ask)",
                         f"{res['layers']} ({res['base_layers']})", f"{res['kv_mib']:.1f}",
                         f"{res['rss_mib']:.1f}"])  # fmt: skip
            n_swa = int(res["n_swa"])
    save(
        f"swa-memory-{args.model.stem}-" + "-".join(str(w) for w in args.windows),
        topic="models",
        title=f"Memory of the live window with and without swa_full ({args.model.name})",
        columns=["window", "swa_full", "layers (full-attention)",
                 "KV allocated (llama.cpp's rule) MiB", "RSS growth MiB"],
        rows=rows,
        models=[args.model],
        notes=f"A fresh process per row: the RSS growth of creating a context of the window "
        f"({N_SEQ} sequences, ubatch {N_BATCH}; llama.cpp clears its KV buffers, so they are "
        f"resident). n_swa {n_swa}: without swa_full the sliding-window layers hold "
        f"n_swa × {N_SEQ} + {N_BATCH} cells, padded to 256.",
    )  # fmt: skip


if __name__ == "__main__":
    main()
