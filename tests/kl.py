"""KL divergence between next-token distributions given as rows of logits (for model tests)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def log_softmax(x: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl_rows(p_logits: npt.NDArray[np.floating], q_logits: npt.NDArray[np.floating]) -> np.ndarray:
    """KL(p || q) per row."""
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def kl(p_logits: npt.NDArray[np.floating], q_logits: npt.NDArray[np.floating]) -> float:
    """Mean KL(p || q) over rows."""
    return float(kl_rows(p_logits, q_logits).mean())
