"""Bad requests get OpenAI's error shape and status from a real `cascade serve` (raw HTTP and the
openai SDK); fields clients commonly send are ignored; the API key is enforced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.helpers import KEY, MODEL, Server, assert_error, make_home

pytestmark = pytest.mark.subprocess

CHAT = "/v1/chat/completions"
#: The server's --system (much longer than the built-in default).
SYSTEM = "Answer every question in one single word and nothing else, whatever is asked."


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, embed_model_path: Path
) -> Iterator[Server]:
    home = make_home(tmp_path_factory.mktemp("serve-requests"), model_path, embed_model_path)
    # the key as pasted from a file: surrounding whitespace is not part of it
    srv = Server(home, "--api-key", f"  {KEY}\n", "--system", SYSTEM)
    try:
        yield srv
    finally:
        assert srv.stop() == 0, srv.stderr()
        assert "Traceback" not in srv.stderr(), srv.stderr()


def chat(**fields: Any) -> dict[str, Any]:
    """A valid chat body (one short reply) with `fields` changed."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say yes."}],
        "max_tokens": 2,
        "temperature": 0,
    }
    body.update(fields)
    return body


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (chat(temperature=2.5), "temperature", "from 0 to 2"),
        (chat(temperature="hot"), "temperature", "from 0 to 2"),
        (chat(top_p=0), "top_p", "above 0"),
        (chat(top_p=1.5), "top_p", "above 0"),
        (chat(max_tokens=0), "max_tokens", "at least 1"),
        (chat(max_completion_tokens=-3), "max_completion_tokens", "at least 1"),
        (chat(n=2), "n", "only n=1"),
        (chat(stop=["a", "b", "c", "d", "e"]), "stop", "at most 4"),
        (chat(stop=[1]), "stop", "strings"),
        (chat(seed="x"), "seed", "integer"),
        (chat(seed=1.5), "seed", "integer"),
        (chat(stream="yes"), "stream", "true or false"),
        (chat(stream_options={"include_usage": True}), "stream_options", "stream: true"),
        (chat(messages=[]), "messages", "non-empty"),
        (chat(messages="hi"), "messages", "non-empty"),
        (chat(messages=None), "messages", "required"),
        (chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role", "unknown role"),
        (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].role", "unknown role"),
        (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content", "string"),
        (chat(messages=["hi"]), "messages[0]", "object"),
        (
            chat(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                        ],
                    }
                ]
            ),
            "messages[0].content[1].type",
            "text only",
        ),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools", "tool"),
        (chat(tool_choice="required"), "tool_choice", "tool"),
        (chat(logprobs=True), "logprobs", "not supported"),
        (chat(top_logprobs=2), "top_logprobs", "not supported"),
        (chat(best_of=2), "best_of", "only best_of=1"),
        (chat(best_of=True), "best_of", "only best_of=1"),
        (chat(cache_salt=""), "cache_salt", "non-empty string"),
        (chat(cache_salt=5), "cache_salt", "non-empty string"),
        (chat(max_tokens=4097), "max_tokens", "cap of 4096"),
        (chat(messages=[{"role": "user", "content": "x"}] * 1025), "messages", "limit of 1024"),
        (chat(response_format={"type": "json_object"}), "response_format", "text"),
        (chat(model=None), "model", "model"),
    ],
)
def test_bad_field_values_are_400_naming_the_field(
    server: Server, body: dict[str, Any], param: str, fragment: str
) -> None:
    error = assert_error(server.post(CHAT, body), 400, param=param)
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"], error


def test_completions_bad_prompts_are_400(server: Server) -> None:
    base = {"model": MODEL, "max_tokens": 1}
    for prompt in ([1, 2, 3], [[1, 2]], ["a", "b"], None, 7):
        response = server.post("/v1/completions", {**base, "prompt": prompt})
        assert_error(response, 400, param="prompt")
    response = server.post("/v1/completions", {**base, "prompt": "x", "echo": True})
    assert_error(response, 400, param="echo")


def test_malformed_json_and_non_objects_are_400(server: Server) -> None:
    for raw in (b"{bad", b"", b"\xff\xfe", b"[1, 2]", b'"text"', b"[" * 100_000):
        error = assert_error(server.post(CHAT, raw), 400, code="invalid_json")
        assert error["type"] == "invalid_request_error"


def test_unknown_model_is_404_model_not_found(server: Server) -> None:
    error = assert_error(server.post(CHAT, chat(model="gpt-4o")), 404, code="model_not_found")
    assert MODEL in error["message"]
    response = httpx.get(
        f"{server.v1}/models/gpt-4o", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert_error(response, 404, code="model_not_found")
    with pytest.raises(openai.NotFoundError):
        server.client().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )


def test_unknown_routes_and_methods_keep_the_error_shape(server: Server) -> None:
    assert_error(httpx.get(f"{server.v1}/engines", timeout=10), 404, code="not_found")
    assert_error(httpx.get(f"{server.base}{CHAT}", timeout=10), 405)


def test_api_key_is_required_everywhere(server: Server) -> None:
    raw = {"model": MODEL, "prompt": "Hi", "max_tokens": 1}
    for key in (None, "wrong"):
        for path, body in ((CHAT, chat()), ("/v1/completions", raw)):
            for stream in (False, True):
                response = server.post(path, {**body, "stream": stream}, key=key)
                assert_error(response, 401, code="invalid_api_key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for path in ("/v1/models", f"/v1/models/{MODEL}", "/health"):
            response = httpx.get(f"{server.base}{path}", headers=headers, timeout=10)
            assert_error(response, 401, code="invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        server.client(key="wrong").models.list()
    # the key the server was given with surrounding whitespace matches, as does a header
    # with a doubled space; /health tells no queue state
    assert server.health() == {"status": "ok", "model": MODEL}
    padded = {"Authorization": f"Bearer  {KEY}"}
    assert httpx.get(f"{server.v1}/models", headers=padded, timeout=10).status_code == 200
    assert [m.id for m in server.client().models.list()] == [MODEL]


def test_sdk_raises_bad_request_for_n_2(server: Server) -> None:
    with pytest.raises(openai.BadRequestError, match="only n=1"):
        server.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1, n=2
        )


def test_fields_clients_commonly_send_are_ignored(server: Server) -> None:
    body = chat(
        user="someone",
        frequency_penalty=0,
        presence_penalty=0,
        logit_bias=None,
        tools=[],
        tool_choice="auto",
        response_format={"type": "text"},
        stream_options=None,
        max_tokens=1,
        messages=[
            {"role": "developer", "content": "Be brief.", "name": "x"},
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": None},
            {"role": "user", "content": [{"type": "text", "text": "Say yes."}]},
        ],
    )
    response = server.post(CHAT, body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["object"] == "chat.completion" and data["usage"]["completion_tokens"] <= 1


def test_a_prompt_longer_than_the_window_is_400_context_length_exceeded(server: Server) -> None:
    words = " ".join(f"word{i}" for i in range(3000))  # well over the 1024-token window
    response = server.post("/v1/completions", {"model": MODEL, "prompt": words, "max_tokens": 1})
    error = assert_error(response, 400, param="prompt", code="context_length_exceeded")
    assert error["type"] == "invalid_request_error"
    assert server.health()["status"] == "ok"


def test_the_system_flag_is_the_default_system_prompt(server: Server) -> None:
    def prompt_tokens(*system: str) -> int:
        lead = [{"role": "system", "content": s} for s in system]
        body = chat(messages=[*lead, {"role": "user", "content": "Say yes."}], max_tokens=1)
        response = server.post(CHAT, body)
        assert response.status_code == 200, response.text
        n: int = response.json()["usage"]["prompt_tokens"]
        return n

    default = prompt_tokens()
    assert default == prompt_tokens(SYSTEM)
    assert default != prompt_tokens("You are a helpful assistant who answers in long sentences.")
