from pathlib import Path

from tests.cli.helpers import run_cli


def test_piped_chat_replies_and_exits_zero(home: Path) -> None:
    proc = run_cli(
        ["chat", "--temperature", "0", "--max-tokens", "24"],
        home,
        stdin="Say hello\nWhat is 2+2?\n",
    )
    assert proc.returncode == 0, proc.stderr
    replies = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(replies) >= 2
    assert "Traceback" not in proc.stderr


def test_chat_reset_and_exit_commands(home: Path) -> None:
    proc = run_cli(
        ["chat", "--temperature", "0", "--max-tokens", "8"],
        home,
        stdin="Hi\n/reset\nHello again\n/exit\nnever answered\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert "conversation reset" in proc.stderr


def test_full_window_is_reported_not_crashed(home: Path) -> None:
    long_message = "word " * 400
    proc = run_cli(
        ["chat", "--gpu-cache-size", "128", "--max-tokens", "8"],
        home,
        stdin=long_message + "\nhi\n",
    )
    assert "context window is full" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 4
    # the short message after the failure still got a reply
    assert proc.stdout.strip()


def test_reply_cut_off_when_window_fills(home: Path) -> None:
    proc = run_cli(
        ["chat", "--gpu-cache-size", "64", "--max-tokens", "200", "--temperature", "0"],
        home,
        stdin="Write a long story about a ship.\n",
    )
    assert "Traceback" not in proc.stderr
    assert "window is full" in proc.stderr
    assert proc.stdout.strip()
