"""`cascade chat` sessions end to end: real model, real store, real processes."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import assert_one_line_error
from tests.cli.ingest_helpers import cli, ingest
from tests.documents.helpers import NEEDLE, env_for, query, write_text
from tests.wait import until

pytestmark = pytest.mark.subprocess

SMALL = ["--gpu-cache-size", "1024", "--temperature", "0", "--max-tokens", "24"]


def chat(home: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cascade_cli", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
        env=env_for(home),
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def sessions(home: Path) -> dict[str, dict[str, Any]]:
    proc = cli(["sessions", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    return {s["name"]: s for s in json.loads(proc.stdout)["sessions"]}


def test_piped_chat_is_saved_under_a_printed_name_and_resumes(home: Path) -> None:
    first = chat(home, "Say hello\nWhat is 2+2?\n", *SMALL)
    assert first.returncode == 0, first.stderr
    assert len([x for x in first.stdout.splitlines() if x.strip()]) >= 2
    found = re.search(r"resume with `cascade chat --session (\S+)`", first.stderr)
    assert found, first.stderr
    name = found.group(1)
    assert sessions(home)[name]["turns"] == 2
    again = chat(home, "Thanks!\n/stats\n/history\n", "--session", name)
    assert again.returncode == 0, again.stderr
    # the window came back from the store, nothing recomputed; only the new message decoded
    assert re.search(r"chunk hits: window \d+ · ram \d+ · disk 3 · recomputed 0", again.stdout)
    assert "What is 2+2?" in again.stdout and "  3 user: Thanks!" in again.stdout
    assert "rebuilt" not in again.stderr
    assert sessions(home)[name]["turns"] == 3


def test_sigkill_mid_reply_leaves_earlier_turns_and_no_half_turn(home: Path) -> None:
    assert chat(home, "My name is Ada.\n", "--session", "k", *SMALL).returncode == 0
    out = (home / "killed.out").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cascade_cli", "chat", "--session", "k", "--max-tokens", "400",
         "--temperature", "0.8", "--seed", "3"],
        stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True,
        env=env_for(home),
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write("Write a very long story about a ship and its crew.\n")
    proc.stdin.flush()

    def replying() -> bool:
        assert proc.poll() is None, (home / "killed.out").read_text()
        return (home / "killed.out").stat().st_size >= 40

    until(replying, what="40 bytes of the reply")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    turns = sessions(home)["k"]["turns"]
    assert turns in (1, 2)  # the interrupted turn is whole or absent
    rows = query(home, "SELECT turn, role FROM session_messages ORDER BY seq")
    assert [r[0] for r in rows] == [t for t in range(1, turns + 1) for _ in range(2)]
    again = chat(home, "/history\nWhat is my name?\n/stats\n", "--session", "k")
    assert again.returncode == 0, again.stderr
    assert "  1 user: My name is Ada." in again.stdout
    assert "recomputed 0" in again.stdout
    assert sessions(home)["k"]["turns"] == turns + 1


def test_another_model_rebuilds_the_session_from_text(
    home: Path, tmp_path: Path, model_path: Path
) -> None:
    assert chat(home, "Remember the word tulip.\nAnd the word anchor.\n", "-s", "m", *SMALL)
    other = tmp_path / "other.gguf"
    shutil.copyfile(model_path, other)
    with other.open("r+b") as fh:  # another file identity, still a loadable model
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    moved = chat(home, "Which words?\n/stats\n", "-s", "m", "--model", str(other))
    assert moved.returncode == 0, moved.stderr
    assert "rebuilt from its text because it was made with SmolLM2" in moved.stderr
    assert "disk 0" in moved.stdout  # never restored from the other model's KV
    assert sessions(home)["m"]["model"] == "other.gguf"
    assert sessions(home)["m"]["turns"] == 3
    back = chat(home, "/stats\n", "-s", "m")
    assert "rebuilt from its text because it was made with other.gguf" in back.stderr
    # documents keep refusing the other model's store
    write_text(tmp_path / "d.txt", 1500)
    refused = cli(["ask", "nothing", "What?", "--model", str(other)], home)
    assert refused.returncode != 0


def test_sessions_list_and_rm_reclaims_space(home: Path) -> None:
    assert chat(home, "Hi\n", "-s", "a b", *SMALL).returncode == 0
    assert chat(home, "Hello\n", "-s", "keep", *SMALL).returncode == 0
    listed = sessions(home)
    assert set(listed) == {"a b", "keep"}
    row = listed["a b"]
    assert row["turns"] == 1 and row["chunks"] == 2 and row["bytes"] > 0
    assert row["compression"] == "q4" and row["tokens"] > 0
    stats = json.loads(cli(["stats", "--json"], home).stdout)
    assert {s["name"] for s in stats["sessions"]} == {"a b", "keep"}
    assert stats["tiers"]["window"]["hits"] > 0
    proc = cli(["rm", "--session", "a b"], home)
    assert proc.returncode == 0 and "removed session a b" in proc.stdout
    assert set(sessions(home)) == {"keep"}
    assert not query(home, "SELECT 1 FROM chunks WHERE owner = 'session:1'")
    assert_one_line_error(cli(["rm", "--session", "a b"], home), "no chat session named")
    assert_one_line_error(cli(["rm"], home), "name one document, one --session or --api")


def test_bad_session_name_is_one_line(home: Path) -> None:
    assert_one_line_error(chat(home, "hi\n", "--session", " "), "invalid session name")
    # terminal escape sequences and control characters never reach a terminal later
    for name in ("red\x1b[31m", "bell\x07", "tab\there"):
        assert_one_line_error(chat(home, "hi\n", "--session", name), "printable characters")


def test_names_with_rich_markup_are_printed_as_they_are(home: Path) -> None:
    name = "[/x] [bold]me[/bold]"
    proc = chat(home, "Hi\n/stats\n", "-s", name, *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert f"session {name}: 1 turns" in proc.stdout and f"session {name}: 1 turns saved" in (
        proc.stderr
    )
    listed = cli(["sessions"], home)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "[/x]" in listed.stdout
    assert cli(["stats"], home).returncode == 0
    assert name in sessions(home)
    assert_one_line_error(cli(["rm", "--session", "[/nope]"], home), "no chat session named")


def test_reset_and_exit_commands(home: Path) -> None:
    proc = chat(home, "Hi\n/reset\nHello again\n/exit\nnever answered\n", "-s", "r", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "conversation reset: 1 turn(s) erased" in proc.stderr
    assert sessions(home)["r"]["turns"] == 1


def test_message_longer_than_the_window_is_paged_through(home: Path, tmp_path: Path) -> None:
    text = write_text(tmp_path / "t.txt", 6000).read_text(encoding="utf-8").replace("\n", " ")
    proc = chat(home, f"{text}\nWho is this text about?\n", "-s", "l", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "paged through" in proc.stderr
    assert len([x for x in proc.stdout.splitlines() if x.strip()]) >= 2
    assert sessions(home)["l"]["turns"] == 2


def test_doc_is_recalled_into_the_conversation(home: Path, tmp_path: Path) -> None:
    ingest(home, write_text(tmp_path / "g.txt", 6000, needle=NEEDLE), "g")
    (needle_chunk,) = {
        int(c)
        for (c, t) in query(
            home,
            "SELECT p.chunk, p.text FROM recall_passages p JOIN recall_corpora c"
            " ON c.id = p.corpus WHERE c.owner LIKE 'doc:%'",
        )
        if "48213" in t
    }
    proc = chat(
        home,
        "What is the pass key? Answer with the number only.\n",
        "-s", "d", "--doc", "g", "--block-size", "128", *SMALL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"recalled g chunk {needle_chunk}" in proc.stderr
    assert "48213" in proc.stdout
    missing = chat(home, "hi\n", "-s", "d", "--doc", "nope", *SMALL)
    assert missing.returncode == 6 and "no ingested document named 'nope'" in missing.stderr


def test_a_session_open_in_one_chat_is_refused_by_another(home: Path) -> None:
    """One `chat` per session, named or generated: a second one is refused in one line (the
    generated name of a chat started without --session is locked too)."""
    for args in (["--session", "mine"], []):
        out = (home / "held.out").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cascade_cli", "chat", *args, *SMALL],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True,
            env=env_for(home),
        )  # fmt: skip
        assert proc.stdin is not None
        try:
            proc.stdin.write("Say hello\n")
            proc.stdin.flush()

            def held(proc: subprocess.Popen[str] = proc, args: list[str] = args) -> set[str]:
                """The session whose first turn is stored."""
                assert proc.poll() is None, (home / "held.out").read_text()
                stored = {n for n, s in sessions(home).items() if s["turns"] >= 1}
                return stored & {"mine"} if args else stored - {"mine"}

            # (each look runs `cascade sessions`: not too often, the chat needs the cores)
            (name,) = until(held, timeout=300, what="the chat's first turn stored", interval=0.5)
            second = chat(home, "Hi\n", "--session", name, *SMALL)
            assert_one_line_error(second, "is open in another `cascade chat`")
        finally:
            proc.stdin.close()
            assert proc.wait(120) == 0


def test_ctrl_c_inside_a_multiline_message_discards_it_and_keeps_the_chat(home: Path) -> None:
    """On a terminal: Ctrl-C while a '\"\"\"' block is typed discards that message; the chat
    goes on (and /exit leaves it with exit 0, nothing stored for the discarded message)."""
    try:
        main, sub = pty.openpty()
    except OSError as exc:  # a sandbox without /dev/ptmx: no terminal to press Ctrl-C in
        pytest.skip(f"no pseudo-terminal: {exc}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cascade_cli", "chat", "--session", "tty", *SMALL],
        stdin=sub, stdout=sub, stderr=sub, env={**env_for(home), "TERM": "dumb"},
        start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )  # fmt: skip  # the terminal is the chat's own: ^C reaches it as SIGINT
    os.close(sub)
    seen = b""

    def wait_for(text: bytes, times: int = 1, timeout: float = 300) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while seen.count(text) < times:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([main], [], [], 1)[0]:
                try:
                    seen += os.read(main, 4096)
                except OSError:  # the child closed the terminal
                    assert seen.count(text) >= times, seen.decode(errors="replace")

    try:
        wait_for(b"> ")
        os.write(main, b'"""\r')
        wait_for(b"... ")
        os.write(main, b"half a message\r")
        wait_for(b"... ", 2)
        os.write(main, b"\x03")  # Ctrl-C, as the terminal sends it
        wait_for(b"(message discarded)")
        os.write(main, b"/exit\r")
        assert proc.wait(60) == 0, seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    assert "Traceback" not in seen.decode(errors="replace")
    assert sessions(home)["tty"]["turns"] == 0
