"""Sample texts shipped with cascade (public domain), for the README's first command and tests.

``persuasion.txt``: chapters 1–4 of Jane Austen's *Persuasion* (1818), from CRAN's
``janeaustenr`` data (see bench/fetch_text.py); public domain.
"""

from __future__ import annotations

from pathlib import Path

SAMPLES = Path(__file__).resolve().parent
PERSUASION = SAMPLES / "persuasion.txt"

__all__ = ["PERSUASION", "SAMPLES"]
