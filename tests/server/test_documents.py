"""A served chat that recalls from ingested documents (cascade's `documents` request field) and
says where the excerpts came from (`sources`), streamed or not; unknown names are a 400."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.ingest_helpers import cli
from tests.documents.helpers import SMALL as INGEST_SMALL
from tests.documents.helpers import sample_text
from tests.server.helpers import KEY, MODEL, Server, assert_error, events, make_home

pytestmark = pytest.mark.subprocess


def test_a_served_chat_recalls_from_a_collection_and_cites_it(
    tmp_path: Path, model_path: Path, embed_model_path: Path
) -> None:
    home = make_home(tmp_path / "home", model_path, embed_model_path)
    root = tmp_path / "lighthouse"
    root.mkdir()
    (root / "keeper.md").write_text(
        "# The keeper\n\n" + sample_text(1500) + "\nThe keeper's boat is called Marigold.\n"
    )
    (root / "door.txt").write_text(sample_text(1500, start=5000) + "\nThe door is painted blue.\n")
    assert cli(["ingest", str(root), *INGEST_SMALL], home).returncode == 0
    server = Server(home, "--api-key", KEY)
    try:
        ask = {
            "model": MODEL, "max_tokens": 8, "temperature": 0, "documents": ["lighthouse"],
            "messages": [{"role": "user", "content": "What is the keeper's boat called?"}],
        }  # fmt: skip
        reply = server.post("/v1/chat/completions", ask)
        assert reply.status_code == 200, reply.text
        sources = reply.json()["sources"]
        assert sources and {s["doc"] for s in sources} <= {
            "lighthouse/keeper.md", "lighthouse/door.txt"
        }  # fmt: skip
        assert any(s["doc"] == "lighthouse/keeper.md" for s in sources), sources
        for s in sources:
            lines = Path(s["path"]).read_text().splitlines()
            assert s["lines"] and 1 <= s["lines"][0] <= s["lines"][1] <= len(lines), s

        streamed = server.post("/v1/chat/completions", {**ask, "stream": True})
        assert streamed.status_code == 200, streamed.text
        chunks = [e for e in events(streamed) if isinstance(e, dict)]
        assert chunks[-1]["choices"][0]["finish_reason"] and chunks[-1]["sources"] == sources

        plain = server.post(
            "/v1/chat/completions", {k: v for k, v in ask.items() if k != "documents"}
        )
        assert plain.status_code == 200 and "sources" not in plain.json()
        assert_error(
            server.post("/v1/chat/completions", {**ask, "documents": ["nosuch"]}), 400,
            code="invalid_value",
        )  # fmt: skip
        assert_error(server.post("/v1/chat/completions", {**ask, "documents": "lighthouse"}), 400)
        assert_error(
            server.post("/v1/completions", {"model": MODEL, "prompt": "Hi", "documents": ["lighthouse"]}),
            400,
        )  # fmt: skip
    finally:
        assert server.stop() == 0
