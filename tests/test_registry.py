import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_cli.errors import DownloadError, InputError, ModelError
from cascade_cli.registry import check_gguf, pull_url, registry, resolve_model


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
    default, specs = registry()
    assert default in specs
    spec = specs[default]
    assert spec.source == "pypi" and len(spec.sha256) == 64 and spec.file.endswith(".gguf")


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
