"""Checking OpenAI request bodies by hand, field by field, into the service's types.

Every problem is a 400 ``invalid_request_error`` whose ``param`` names the field (an unknown model
is a 404). Fields OpenAI clients commonly send and that change nothing here (``user``,
``frequency_penalty``, ``logit_bias`` …) are ignored; features the server cannot honour
(tools, non-text content, several choices, logprobs) are refused rather than silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from cascade_cli.prompts.types import ROLES, Message, Params
from cascade_cli.server.limits import Limits
from cascade_cli.server.openai_errors import ApiError, bad_field

#: OpenAI's limit on stop sequences.
MAX_STOP = 4
#: The longest cache_salt taken.
MAX_SALT = 256


@dataclass
class Request:
    """A checked request: chat messages or a raw prompt, sampling, and how to answer."""

    model: str
    params: Params
    messages: list[Message] = field(default_factory=list)
    prompt: str | None = None
    stream: bool = False
    include_usage: bool = False


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying it is not one."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # deep nesting: Recursion
        raise ApiError(
            400,
            f"We could not parse the JSON body of your request ({exc}). Send a JSON object "
            "with Content-Type: application/json.",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    return body


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _model(body: dict[str, Any], served: str) -> str:
    model = body.get("model")
    if model is None:
        raise bad_field("model", "You must provide a model parameter.")
    if not isinstance(model, str):
        raise bad_field("model", "model must be a string.")
    if model != served:
        raise ApiError(
            404,
            f"The model `{model}` does not exist; this server serves `{served}`.",
            param="model",
            code="model_not_found",
        )
    return model


def _refuse(body: dict[str, Any]) -> None:
    """Features this server cannot honour: a clear 400 instead of a silent answer without them."""
    for name in ("tools", "functions"):
        if body.get(name):
            raise bad_field(name, f"`{name}` is not supported by this server (no tool calling).")
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none", "auto"):  # "auto" without tools: no tool
            raise bad_field(name, f"`{name}` is not supported by this server (no tool calling).")
    if body.get("logprobs") not in (None, False, 0):
        raise bad_field("logprobs", "logprobs are not supported by this server.")
    if body.get("top_logprobs") is not None:
        raise bad_field("top_logprobs", "top_logprobs are not supported by this server.")
    best_of = body.get("best_of")
    if best_of is not None and not (_is_int(best_of) and best_of == 1):
        raise bad_field("best_of", f"only best_of=1 is supported by this server, got {best_of!r}.")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_field("response_format", 'only response_format {"type": "text"} is supported.')


def _params(body: dict[str, Any], limits: Limits) -> Params:
    params = Params()
    cap = limits.max_reply_tokens
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not _is_int(value) or value < 1:
            raise bad_field(name, f"{name} must be an integer of at least 1, got {value!r}.")
        if value > cap:
            raise bad_field(
                name,
                f"{name} is {value}, above this server's cap of {cap} (max_reply_tokens); "
                "ask for fewer tokens.",
            )
        if params.max_tokens is None:  # max_completion_tokens wins when both are given
            params.max_tokens = value
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise bad_field(
                "temperature", f"temperature must be a number from 0 to 2, got {temperature!r}."
            )
        params.temperature = float(temperature)
    top_p = body.get("top_p")
    if top_p is not None:
        if not _is_number(top_p) or not 0 < top_p <= 1:
            raise bad_field(
                "top_p", f"top_p must be a number above 0 and at most 1, got {top_p!r}."
            )
        params.top_p = float(top_p)
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed):
            raise bad_field("seed", f"seed must be an integer, got {seed!r}.")
        params.seed = seed
    params.stop = _stop(body.get("stop"))
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise bad_field("n", f"only n=1 is supported by this server, got {n!r}.")
    salt = body.get("cache_salt")
    if salt is not None:
        if not isinstance(salt, str) or not salt or len(salt) > MAX_SALT:
            raise bad_field(
                "cache_salt",
                f"cache_salt must be a non-empty string of at most {MAX_SALT} characters.",
            )
        params.salt = salt
    params.think = _think(body)
    params.documents = _documents(body.get("documents"))
    return params


#: The most documents (or collections) one request may name.
MAX_DOCUMENTS = 16


def _documents(value: Any) -> list[str]:
    """cascade's `documents`: names of ingested documents or collections to recall from."""
    if value is None:
        return []
    if (
        not isinstance(value, list)
        or not all(isinstance(v, str) and v.strip() for v in value)
        or not 1 <= len(value) <= MAX_DOCUMENTS
    ):
        raise bad_field(
            "documents",
            f"documents must be a list of 1 to {MAX_DOCUMENTS} ingested document or collection "
            "names.",
        )
    return [v.strip() for v in value]


#: OpenAI's reasoning_effort values; "none" and "minimal" ask a reasoning model not to think
EFFORTS = ("none", "minimal", "low", "medium", "high")


def _think(body: dict[str, Any]) -> bool | None:
    """Whether a reasoning model thinks first: `chat_template_kwargs.enable_thinking` (as
    llama.cpp's server takes it), else `reasoning_effort`; None: the server's setting."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad_field("chat_template_kwargs", "chat_template_kwargs must be an object.")
    enable = (kwargs or {}).get("enable_thinking")
    if enable is not None:
        if not isinstance(enable, bool):
            raise bad_field(
                "chat_template_kwargs.enable_thinking",
                "chat_template_kwargs.enable_thinking must be true or false.",
            )
        return enable
    effort = body.get("reasoning_effort")
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise bad_field(
            "reasoning_effort", f"reasoning_effort must be one of {', '.join(EFFORTS)}."
        )
    return effort not in ("none", "minimal")


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad_field("stop", "stop must be a string or a list of strings.")
    if len(value) > MAX_STOP:
        raise bad_field("stop", f"stop takes at most {MAX_STOP} sequences, got {len(value)}.")
    return [s for s in value if s]


def _stream(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_field("stream", "stream must be true or false.")
    options = body.get("stream_options")
    include = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad_field("stream_options", "stream_options must be an object.")
        if not stream:
            raise bad_field(
                "stream_options",
                "stream_options is only allowed with stream: true (drop it, or set stream).",
            )
        include = options.get("include_usage", False)
        if not isinstance(include, bool):
            raise bad_field(
                "stream_options.include_usage",
                "stream_options.include_usage must be true or false.",
            )
    return bool(stream), bool(stream) and include


def _content(value: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts: list[str] = []
        for j, part in enumerate(value):
            at = f"{where}[{j}]"
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad_field(at, "a content part must be an object with a type.")
            if part["type"] != "text":
                raise bad_field(
                    f"{at}.type",
                    f"content parts of type {part['type']!r} are not supported; this server "
                    "takes text only.",
                )
            if not isinstance(part.get("text"), str):
                raise bad_field(f"{at}.text", "a text part needs a string `text`.")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_field(where, "content must be a string or a list of text parts.")


def _messages(value: Any, limit: int) -> list[Message]:
    if value is None:
        raise bad_field("messages", "messages is required.")
    if not isinstance(value, list) or not value:
        raise bad_field("messages", "messages must be a non-empty list.")
    if len(value) > limit:
        raise bad_field(
            "messages",
            f"messages holds {len(value)} messages, above this server's limit of {limit} "
            "(max_messages); send fewer.",
        )
    out: list[Message] = []
    for i, item in enumerate(value):
        at = f"messages[{i}]"
        if not isinstance(item, dict):
            raise bad_field(at, "each message must be an object with a role and content.")
        role = item.get("role")
        if role not in ROLES:
            raise bad_field(
                f"{at}.role",
                f"unknown role {role!r}; use one of {', '.join(ROLES)} (tool messages are "
                "not supported).",
            )
        if item.get("tool_calls"):
            raise bad_field(f"{at}.tool_calls", "tool calls are not supported by this server.")
        content = item.get("content")
        if content is None and role == "assistant":  # OpenAI allows a reply without content
            content = ""
        out.append(Message(role=role, content=_content(content, f"{at}.content")))
    return out


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        return value
    if value is None:
        raise bad_field("prompt", "prompt is required.")
    raise bad_field(
        "prompt",
        "prompt must be a string or a list of one string (token arrays are not supported).",
    )


def parse(raw: bytes, chat: bool, served: str, limits: Limits) -> Request:
    """A request body, parsed and checked (run off the event loop: a large body takes time)."""
    body = parse_json(raw)
    if chat:
        return chat_request(body, served, limits)
    return completion_request(body, served, limits)


def chat_request(body: dict[str, Any], served: str, limits: Limits) -> Request:
    """A /v1/chat/completions body, checked."""
    model = _model(body, served)
    _refuse(body)
    messages = _messages(body.get("messages"), limits.max_messages)
    params = _params(body, limits)
    stream, include = _stream(body)
    return Request(model, params, messages=messages, stream=stream, include_usage=include)


def completion_request(body: dict[str, Any], served: str, limits: Limits) -> Request:
    """A /v1/completions body, checked."""
    model = _model(body, served)
    _refuse(body)
    for name in ("echo",):
        if body.get(name):
            raise bad_field(name, f"`{name}` is not supported by this server.")
    if body.get("suffix"):
        raise bad_field("suffix", "`suffix` is not supported by this server.")
    prompt = _prompt(body.get("prompt"))
    params = _params(body, limits)
    stream, include = _stream(body)
    return Request(model, params, prompt=prompt, stream=stream, include_usage=include)
