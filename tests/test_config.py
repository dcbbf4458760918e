import os
from pathlib import Path

import pytest

from cascade_cli.config import Settings, parse_size, resolve
from cascade_cli.errors import ConfigError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings tests start from no CASCADE_* variables."""
    for key in list(os.environ):
        if key.startswith("CASCADE_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512MiB", 512 * 1024**2),
        ("2GB", 2 * 10**9),
        ("1048576", 1048576),
        ("1.5 KiB", 1536),
        (0, 0),
    ],
)
def test_parse_size_units(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["-1MiB", "12 parsecs", "lots", True])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ConfigError):
        parse_size(text)


def test_precedence_defaults_file_env_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    assert resolve().block_size == Settings().block_size
    (tmp_path / "cascade.toml").write_text('block_size = 256\ncompression = "q8"\nthreads = 3\n')
    cfg = resolve()
    assert (cfg.block_size, cfg.compression, cfg.threads) == (256, "q8", 3)
    monkeypatch.setenv("CASCADE_BLOCK_SIZE", "128")
    monkeypatch.setenv("CASCADE_MEMORY_CACHE_SIZE", "1GiB")
    cfg = resolve()
    assert (cfg.block_size, cfg.compression, cfg.memory_cache_size) == (128, "q8", 1024**3)
    cfg = resolve({"block_size": "64", "compression": None})
    assert (cfg.block_size, cfg.compression) == (64, "q8")


def test_explicit_config_and_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    path = tmp_path / "other.toml"
    path.write_text('[cascade]\ngpu_cache_size = "8k"\ndisk_cache_path = "~/kv"\n')
    cfg = resolve(config_file=path)
    assert cfg.gpu_cache_size == 8192
    assert cfg.disk_cache_path == Path("~/kv").expanduser()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('compression = "zstd"', "compression"),
        ('memory_cache_size = "-5MiB"', "negative"),
        ("gpu_cache_size = 10", "below"),
        ("colour = 1", "unknown setting"),
        ("block_size = [", "not valid TOML"),
    ],
)
def test_bad_config_values(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        resolve(config_file=path)
    assert fragment in info.value.one_line()


def test_unreadable_and_missing_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        resolve(config_file=tmp_path)  # a directory
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(config_file=tmp_path / "nope.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"model = '\xff'\n")
    with pytest.raises(ConfigError):
        resolve(config_file=bad)


def test_server_settings_from_file_env_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cascade.toml"
    path.write_text('allow_origins = ["https://app.example/", "http://*.lan:3000"]\n')
    cfg = resolve(None, path)
    assert cfg.allow_origins == ("https://app.example", "http://*.lan:3000")
    assert (cfg.max_body_size, cfg.max_queue, cfg.api_cache_budget) == (4 * 2**20, 16, 2 * 2**30)
    monkeypatch.setenv("CASCADE_ALLOW_ORIGINS", "http://a.example, http://b.example:81")
    monkeypatch.setenv("CASCADE_MAX_BODY_SIZE", "1MiB")
    cfg = resolve(None, path)
    assert cfg.allow_origins == ("http://a.example", "http://b.example:81")
    assert cfg.max_body_size == 2**20
    assert resolve({"allow_origins": ["*"], "max_queue": "2"}, path).allow_origins == ("*",)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ({"allow_origins": ["app.example"]}, "allow_origins entry"),
        ({"allow_origins": ["http://app.example/path"]}, "allow_origins entry"),
        ({"max_body_size": "10"}, "below 1KiB"),
        ({"max_queue": "0"}, "below 1"),
        ({"max_reply_tokens": "many"}, "max_reply_tokens"),
    ],
)
def test_bad_server_settings(flags: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        resolve(flags, None)


def test_answer_defaults_from_file_env_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sampling and framing defaults are settings: cascade.toml, CASCADE_* and flags set them."""
    assert (Settings().temperature, Settings().ask_temperature, Settings().quote) == (
        0.7,
        0.0,
        "best",
    )
    cfg = tmp_path / "cascade.toml"
    cfg.write_text('temperature = 0.2\nquote = "tops"\nsystem = "Be brief."\nask_tokens = 64\n')
    monkeypatch.setenv("CASCADE_TOP_P", "0.5")
    monkeypatch.setenv("CASCADE_ASK_NOTE", "System")
    s = resolve({"neighbors": 0}, cfg)
    assert (s.temperature, s.quote, s.system, s.ask_tokens) == (0.2, "tops", "Be brief.", 64)
    assert (s.top_p, s.neighbors, s.ask_note) == (0.5, 0, "system")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ({"temperature": "warm"}, "invalid temperature"),
        ({"top_p": 1.5}, "out of range"),
        ({"quote": "some"}, "unknown quote"),
        ({"ask_note": "margin"}, "unknown ask_note"),
        ({"ask_tokens": 0}, "below 1"),
    ],
)
def test_bad_answer_defaults(flags: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        resolve(flags)


def test_a_models_own_defaults_sit_between_built_in_and_the_file(tmp_path: Path) -> None:
    """built-in < the model's registry entry < cascade.toml < environment < flags."""
    own = {"big": {"quote": "tops", "neighbors": 2, "ask_tokens": 128}}

    def lookup(model: str) -> dict[str, object]:
        return dict(own.get(model, {}))

    cfg = tmp_path / "cascade.toml"
    cfg.write_text('model = "big"\nneighbors = 3\n')
    s = resolve({}, cfg, lookup)
    assert (s.quote, s.neighbors, s.ask_tokens) == ("tops", 3, 128)
    s = resolve({"ask_tokens": 32}, cfg, lookup)
    assert s.ask_tokens == 32
    s = resolve({"model": "small"}, cfg, lookup)  # another model: none of big's defaults
    assert (s.quote, s.neighbors, s.ask_tokens) == ("best", 3, 256)
