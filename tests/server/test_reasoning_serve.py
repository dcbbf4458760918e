"""A reasoning model behind the server: each request may ask it to think first or not
(`reasoning_effort`, `chat_template_kwargs.enable_thinking`), the `think` setting otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.retemplate import THINK, retemplate
from tests.server.helpers import KEY, Server, assert_error, make_home

pytestmark = pytest.mark.subprocess

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, embed_model_path: Path
) -> Iterator[Server]:
    home = make_home(tmp_path_factory.mktemp("serve-think"), model_path, embed_model_path)
    thinker = retemplate(model_path, home / "models" / "think.gguf", THINK)
    srv = Server(home, "--api-key", KEY, "--model", str(thinker))
    try:
        yield srv
    finally:
        srv.stop()


def ask(server: Server, **fields: Any) -> httpx.Response:
    name = httpx.get(
        f"{server.v1}/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    ).json()["data"][0]["id"]
    body = {"model": name, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 1}
    return server.post(CHAT, {**body, **fields})


def prompt_tokens(server: Server, **fields: Any) -> int:
    response = ask(server, **fields)
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["prompt_tokens"])


def test_each_request_may_ask_a_reasoning_model_to_think_or_not(server: Server) -> None:
    default = prompt_tokens(server)  # the setting: off, the empty think block decoded
    assert prompt_tokens(server, reasoning_effort="none") == default
    off = prompt_tokens(server, chat_template_kwargs={"enable_thinking": False})
    assert off == default
    on = prompt_tokens(server, reasoning_effort="high")
    assert on < default  # `<think>` alone opens the reply
    assert prompt_tokens(server, chat_template_kwargs={"enable_thinking": True}) == on
    assert prompt_tokens(server) == default  # one request's choice does not stay
    assert_error(ask(server, reasoning_effort=3), 400, param="reasoning_effort")
    kwargs = {"enable_thinking": "yes"}
    assert_error(
        ask(server, chat_template_kwargs=kwargs), 400, param="chat_template_kwargs.enable_thinking"
    )
