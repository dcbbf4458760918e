"""Sliding-window models: a window laid out once in position order (what `ask` builds) is exact
without swa_full, i.e. with llama.cpp keeping only the SWA cells a decode can still see."""

from __future__ import annotations

import numpy as np

from cascade_cli.samples import PERSUASION


def test_ask_layout_is_exact_without_swa_full(gemma: object) -> None:
    from cascade_cli.engine import Context
    from cascade_cli.engine.live import Window

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


def test_chunks_far_from_the_end_need_no_swa_section(gemma: object) -> None:
    """Leaving out the SWA section of chunks that end n_swa or more positions before the
    question keeps every cell a decode sees: the logits differ only as much as placing the same
    layout in other cache cells does (a float summation order; KL ≈ 0.005 on this model), while
    leaving out the SWA section of a chunk within n_swa changes the answer's distribution."""
    from cascade_cli import kv
    from cascade_cli.engine import Context
    from cascade_cli.engine.live import Window
    from cascade_cli.kv import sections
    from tests.kl import kl_rows

    toks = gemma.tokenize(PERSUASION.read_text())[:3200]  # type: ignore[attr-defined]
    block, n_swa = 256, gemma.n_swa  # type: ignore[attr-defined]
    with Context(gemma, 2048 + 512, 4, 256, 1, "off") as ctx:  # type: ignore[arg-type]
        win = Window(ctx, 2048)
        win.append(toks[:1800])
        payloads = [
            kv.encode(win.save(p, p + block), "q8", layout="iswa") for p in range(0, 1792, block)
        ]
    order = [3, 6, 1, 0, 4]
    question = toks[3000:3032]
    end = 20 + len(order) * block

    def run(slim: set[int]) -> np.ndarray:
        with Context(gemma, 2048 + 512, 4, 256, 1, "off", swa_full=False) as ctx:  # type: ignore[arg-type]
            win = Window(ctx, 2048)
            win.append(toks[:20])
            for j, i in enumerate(order):
                state = kv.decode(payloads[i], swa=j not in slim)
                if j in slim:
                    assert kv.header(sections.split(state, "iswa")[1]).n_cells == 0
                win.place(state)
            out: np.ndarray = win.append(question, logits="all")
            return out

    far = {j for j in range(len(order)) if 20 + (j + 1) * block <= end - n_swa}
    assert far == {0, 1, 2}  # n_swa 512, question at 1300: the chunks ending by 788
    ref = run(set())
    assert float(kl_rows(ref, run(far)).mean()) < 0.02
    assert float(kl_rows(ref, run(far | {3})).mean()) > 0.05  # a chunk within n_swa is seen
