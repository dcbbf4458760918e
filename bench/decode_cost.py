"""What a decode costs at the end of a nearly full window, by batch size, against copying cells.

python bench/decode_cost.py [--threads 2]

The window holds 3,500 tokens of *Emma*; each figure is the median of 7 runs, the window cut back
to those 3,500 tokens between runs: decoding 2, 8, 40, 300 and 340 tokens at its end, saving
30 cells of the window and placing them at its end (Window.save + Window.place, the copy a quote
note uses), and a whole copied note (8 tokens decoded, 30 copied, 2 decoded).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.niah import MODEL  # noqa: E402
from cascade_cli.engine import Context, Model, set_verbose  # noqa: E402
from cascade_cli.paging.window import Window  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_verbose(False)
    with Model(MODEL) as m, Context(m, 4096 + 256, 4, 512, args.threads) as ctx:
        win = Window(ctx, 4096)
        text = (ROOT / "bench" / "data" / "emma.txt").read_text(encoding="utf-8")
        toks = m.tokenize(text[20000:40000])[:3500]
        win.append(toks)
        base = win.end

        def run(f: Callable[[], object], k: int = 7) -> float:
            ts = []
            for _ in range(k):
                win.truncate(base)
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
            return statistics.median(ts) * 1000

        rows = [
            ("decode 2 tokens", lambda: win.append(toks[100:102])),
            ("decode 8 tokens", lambda: win.append(toks[:8])),
            ("decode 40 tokens", lambda: win.append(toks[300:340])),
            ("decode 300 tokens", lambda: win.append(toks[200:500])),
            ("decode 340 tokens", lambda: win.append(toks[300:340] + toks[200:500])),
            ("copy 30 cells (save + place)", lambda: win.place(win.save(1000, 1030))),
            ("copied note: 8 decoded, 30 copied, 2 decoded", lambda: win.append_copying(
                toks[:8] + toks[1000:1030] + toks[100:102], 8, 1000, 30)),
        ]  # fmt: skip
        print(f"| at the end of a 3,500-token window, {args.threads} threads | median ms |")
        print("|---|---|")
        for name, f in rows:
            print(f"| {name} | {run(f):.1f} |", flush=True)


if __name__ == "__main__":
    main()
