"""The plainest Messages requests as chat bodies, without the general path's machinery.

Most requests of the `anthropic` SDKs' simple uses are one shape: string contents in turns that
alternate, a string `system` at most, and a few sampling fields. For them the general path
(`checks.check_request`, the citations' and documents' scans, `request.chat_body`) costs about
12 µs; `plain_chat_body` checks and builds the same in about 1.5, which is most of what a
`/v1/messages` request costs over the same chat completion (bench/README, "Anthropic's Messages
API against chat").

It takes only a body `check_request` accepts and builds what `chat_body` builds for it (the unit
tests hold both over a table of shapes); for anything else it answers None and the body goes the
general way, so no refusal is worded here and none can differ.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plain_chat_body"]

_ROLES = ("user", "assistant")


def plain_chat_body(body: dict[str, Any], *, stream: bool) -> dict[str, Any] | None:
    """The chat completions body for a Messages request of the plain shape, or None when it is not one."""
    model, max_tokens, messages = body.get("model"), body.get("max_tokens"), body.get("messages")
    # type() and not isinstance(): a bool is no token count, and JSON gives no subclasses.
    if type(model) is not str or type(max_tokens) is not int or max_tokens < 1 or type(messages) is not list or not messages:
        return None
    chat: dict[str, Any] = {"model": model, "messages": None, "max_completion_tokens": max_tokens}
    system = ""
    for name, value in body.items():
        if name in ("model", "max_tokens", "messages"):
            continue
        if name == "stream":
            if type(value) is not bool:
                return None
        elif name == "system":
            if type(value) is not str or (value and not value.strip()):
                return None
            system = value
        elif name == "temperature" or name == "top_p":
            if type(value) is not float and type(value) is not int or not 0 <= value <= 1:
                return None
            chat[name] = value
        elif name == "top_k":
            if type(value) is not int or value < 0:
                return None
            chat[name] = value
        elif name == "stop_sequences":
            if type(value) is not list or any(type(stop) is not str for stop in value):
                return None
            if value:
                chat["stop"] = list(value)
        elif name == "metadata":
            user = _user_id(value)
            if user is False:
                return None
            if user is not None:
                chat["user"] = user
        else:
            return None
    turns = _turns(messages, system)
    if turns is None:
        return None
    chat["messages"] = turns
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _turns(messages: list[Any], system: str) -> list[dict[str, Any]] | None:
    """The chat messages: each message as it is (`role` and a string `content` are a chat
    message's too), when every one is that and no two in a row share a role (which the general
    path merges into one turn)."""
    turns: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    previous = None
    for message in messages:
        if type(message) is not dict or len(message) != 2:
            return None
        role = message.get("role")
        if role == previous or role not in _ROLES or type(message.get("content")) is not str:
            return None
        turns.append(message)
        previous = role
    return turns


def _user_id(metadata: Any) -> str | None | bool:
    """`metadata.user_id` (None: none given); False when `metadata` is not of the plain shape."""
    if type(metadata) is not dict or any(key != "user_id" for key in metadata):
        return False
    user = metadata.get("user_id")
    if user is not None and type(user) is not str:
        return False
    return user
