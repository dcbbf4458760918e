"""session/catalog's migrations, on a sessions table as an earlier release wrote it."""

from __future__ import annotations

import json
import sqlite3

from cascade_cli.session.transcripts import m001_sessions, m002_settings_follow_defaults


def test_stored_sampling_defaults_are_dropped_and_chosen_values_kept() -> None:
    """Sessions stored every default of the time; those now follow the settings, while what a
    session's flags chose (and its system prompt) stays with it."""
    conn = sqlite3.connect(":memory:")
    m001_sessions(conn)
    old = {"system": "Be terse.", "temperature": 0.7, "top_k": 40, "top_p": 0.95,
           "repeat_penalty": 1.0, "seed": None, "max_tokens": 512}  # fmt: skip
    chosen = {**old, "temperature": 0.0, "seed": 7}
    for name, settings in (("a", old), ("b", chosen)):
        conn.execute(
            "INSERT INTO sessions (name, model, fingerprint, scheme, settings, created, updated)"
            " VALUES (?, 'm', 'f', 'q4', ?, 0, 0)",
            (name, json.dumps(settings)),
        )
    m002_settings_follow_defaults(conn)
    rows = dict(conn.execute("SELECT name, settings FROM sessions").fetchall())
    assert json.loads(rows["a"]) == {"system": "Be terse."}
    assert json.loads(rows["b"]) == {"system": "Be terse.", "temperature": 0.0, "seed": 7}
