"""A scripted chat model: an OpenAI-compatible server on 127.0.0.1 whose answers follow a script,
for driving a real agent (Claude Code) through a known sequence of tool calls.

Each request with tools is answered with the script's step numbered by the tool results already
in its messages (no results yet: step 0): a tool call (`{"name", "arguments"}`), or, past the
script's end, the final text. A request without tools (an agent's side calls: a title, a summary)
is answered "ok". Streamed or not, as asked. Every request is kept, for tests to read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ScriptedModel", "running_scripted_model"]


@dataclass
class ScriptedModel:
    base_url: str
    steps: Sequence[dict[str, Any]]
    final: str
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def running_scripted_model(steps: Sequence[dict[str, Any]], final: str = "Done.") -> Iterator[ScriptedModel]:
    model = ScriptedModel("", steps, final)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model))
    model.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()


def _answer(model: ScriptedModel, body: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(text, tool call) of the answer to `body`."""
    if not body.get("tools"):
        return "ok", None
    step = sum(1 for message in body.get("messages", ()) if message.get("role") == "tool")
    if step < len(model.steps):
        return None, model.steps[step]
    return model.final, None


def _completion(text: str | None, call: dict[str, Any] | None, step: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call is not None:
        message["tool_calls"] = [{"id": f"call_step{step}", "type": "function",
                                  "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]
    return {"id": f"chatcmpl-{step}", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _chunks(text: str | None, call: dict[str, Any] | None, step: int) -> Iterator[dict[str, Any]]:
    head = {"id": f"chatcmpl-{step}", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    if text:
        yield {**head, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    if call is not None:
        arguments = json.dumps(call["arguments"])
        middle = len(arguments) // 2  # in two pieces, as models stream them
        yield {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": f"call_step{step}", "type": "function", "function": {
            "name": call["name"], "arguments": arguments[:middle]}}]}, "finish_reason": None}]}
        yield {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": arguments[middle:]}}]},
                                    "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if call else "stop"}]}
    yield {**head, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            model.requests.append(body)
            text, call = _answer(model, body)
            step = len(model.requests)
            if not body.get("stream"):
                self._send(200, _completion(text, call, step))
                return
            frames = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in _chunks(text, call, step)) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(frames)))
            self.end_headers()
            self.wfile.write(frames)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
