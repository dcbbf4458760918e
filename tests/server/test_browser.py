"""A real browser (headless Chromium) on a page from another origin calling `cascade serve`:
refused unless the origin was allowed with --allow-origin, and never by a text/plain POST.

The page is served on a loopback port under two names that Chromium resolves to 127.0.0.1
(`--host-resolver-rules`): `evil.test`, which nobody allowed, and `good.test`, which the server
was started to allow. It calls the server with a synchronous XMLHttpRequest while it loads, so
the result is in the DOM that `--dump-dom` prints."""

from __future__ import annotations

import html
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.server.helpers import MODEL, Server, make_home

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
    ),
]

PAGE = """<!doctype html><html><body><pre id="out">pending</pre><script>
function call(kind) {
  var x = new XMLHttpRequest();
  try {
    x.open("POST", "%(api)s/v1/chat/completions", false);
    x.setRequestHeader("Content-Type", kind);
    x.send(JSON.stringify({model: "%(model)s", max_tokens: 2, temperature: 0,
                           messages: [{role: "user", content: "Say yes."}]}));
    return kind + " -> " + x.status + " " + x.responseText;
  } catch (e) {
    return kind + " -> refused (" + e.name + ")";
  }
}
document.getElementById("out").textContent =
  call("application/json") + "\\n" + call("text/plain");
</script></body></html>"""


@pytest.fixture()
def page_server() -> Iterator[tuple[ThreadingHTTPServer, dict[str, str]]]:
    """A page server on a loopback port; its page is set once the API's URL is known."""
    page: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = page.get("html", "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd, page
    finally:
        httpd.shutdown()
        httpd.server_close()


def _dump_dom(url: str) -> str:
    """The page's text after it loaded, as headless Chromium rendered it."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile}",
                "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP good.test 127.0.0.1",
                "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return html.unescape(proc.stdout)


def test_a_page_from_another_origin_is_refused_and_an_allowed_one_served(
    tmp_path: Path,
    model_path: Path,
    embed_model_path: Path,
    page_server: tuple[ThreadingHTTPServer, dict[str, str]],
) -> None:
    httpd, page = page_server
    port = httpd.server_address[1]
    home = make_home(tmp_path, model_path, embed_model_path)
    server = Server(home, "--allow-origin", f"http://good.test:{port}")  # no key: the default
    try:
        page["html"] = PAGE % {"api": server.base, "model": MODEL}
        evil = _dump_dom(f"http://evil.test:{port}/")
        assert "application/json -> refused (NetworkError)" in evil, evil
        assert "text/plain -> refused (NetworkError)" in evil, evil
        assert "chat.completion" not in evil
        good = _dump_dom(f"http://good.test:{port}/")
        assert "application/json -> 200 " in good and '"object":"chat.completion"' in good, good
        # even an allowed page's text/plain POST (no preflight) is refused
        assert "text/plain -> 415 " in good and "unsupported_media_type" in good, good
    finally:
        assert server.stop() == 0, server.stderr()
    assert "Traceback" not in server.stderr()
