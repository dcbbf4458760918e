"""Sliding-window models: a window laid out once in position order (what `ask` builds) is exact
without swa_full, i.e. with llama.cpp keeping only the SWA cells a decode can still see."""

from __future__ import annotations

import numpy as np

from cascade_cli.samples import PERSUASION


def test_ask_layout_is_exact_without_swa_full(gemma: object) -> None:
    from cascade_cli.engine import Context
    from cascade_cli.paging.window import Window

    toks = gemma.tokenize(PERSUASION.read_text())[:3200]  # type: ignore[attr-defined]
    block = 256
    with Context(gemma, 2048 + 512, 4, 256, 1, "off") as ctx:  # type: ignore[arg-type]
        win = Window(ctx, 2048)
        win.append(toks[:1800])
        blobs = [win.save(p, p + block).copy() for p in range(0, 1792, block)]
    order = [3, 6, 1, 0, 4]  # other positions, another order: every chunk moves
    question = toks[3000:3032]
    logits = {}
    for full in (True, False):
        with Context(gemma, 2048 + 512, 4, 256, 1, "off", swa_full=full) as ctx:  # type: ignore[arg-type]
            win = Window(ctx, 2048)
            win.append(toks[:20])  # a sink
            for i in order:
                win.place(blobs[i])
            logits[full] = win.append(question, logits="all")
    assert win.end == 20 + len(order) * block + len(question)
    assert np.array_equal(logits[True], logits[False])
