from pathlib import Path

import pytest

from tests.cli.helpers import assert_one_line_error, run_cli

pytestmark = pytest.mark.subprocess


def test_missing_model_file(home: Path) -> None:
    proc = run_cli(["chat", "--model", str(home / "nope.gguf")], home, stdin="hi\n")
    assert_one_line_error(proc, "does not exist")


def test_not_a_gguf(home: Path) -> None:
    path = home / "notes.gguf"
    path.write_text("these are my notes")
    assert_one_line_error(run_cli(["chat", "--model", str(path)], home, "hi\n"), "not a GGUF")


def test_corrupt_gguf(home: Path, model_path: Path) -> None:
    path = home / "broken.gguf"
    path.write_bytes(model_path.read_bytes()[: 3 * 1024 * 1024])
    proc = run_cli(["chat", "--model", str(path)], home, "hi\n")
    assert_one_line_error(proc, "could not load")
    assert proc.returncode == 3


def test_unknown_model_name(home: Path) -> None:
    assert_one_line_error(run_cli(["chat", "--model", "gpt-17"], home, "hi\n"), "unknown model")


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (["chat", "--gpu-cache-size", "-5"], {}, "gpu_cache_size"),
        (["chat"], {"CASCADE_MEMORY_CACHE_SIZE": "-1GiB"}, "negative"),
        (["chat"], {"CASCADE_COMPRESSION": "zstd"}, "unknown compression"),
        (["chat", "--threads", "many"], {}, "threads"),
    ],
)
def test_invalid_settings(home: Path, args: list[str], env: dict[str, str], fragment: str) -> None:
    proc = run_cli(args, home, "hi\n", env=env)
    assert_one_line_error(proc, fragment)
    assert proc.returncode == 2


def test_unreadable_config(home: Path) -> None:
    bad = home / "cascade.toml"
    bad.write_text("block_size = [\n")
    assert_one_line_error(run_cli(["chat"], home, "hi\n"), "not valid TOML")
    assert_one_line_error(
        run_cli(["--config", str(home), "chat"], home, "hi\n"), "cannot read config"
    )


def test_debug_shows_traceback(home: Path) -> None:
    proc = run_cli(["--debug", "chat", "--model", "gpt-17"], home, "hi\n")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_help_lists_commands(home: Path) -> None:
    proc = run_cli(["--help"], home)
    assert proc.returncode == 0
    for command in ("chat", "models"):
        assert command in proc.stdout
    proc = run_cli(["chat", "--help"], home)
    for flag in ("--gpu-cache-size", "--model", "--gpu-layers", "--threads", "--temperature"):
        assert flag in proc.stdout


def test_models_list_json(home: Path) -> None:
    proc = run_cli(["models", "list", "--json"], home)
    assert proc.returncode == 0
    assert '"smollm2-135m"' in proc.stdout and '"pulled": true' in proc.stdout
