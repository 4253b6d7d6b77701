"""A batch's input file, read line by line and checked as OpenAI checks it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contract.files.protocol import FileContent
from providers.batches.lines import Checker, read_lines


def request(custom_id: Any = "a", **fields: Any) -> bytes:
    value = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, **fields}
    return json.dumps(value).encode()


@pytest.mark.parametrize(("raw", "code", "param"), [
    (b"{oops", "invalid_json_line", None),
    (b"[1, 2]", "invalid_json_line", None),
    (request(custom_id=""), "missing_required_parameter", "custom_id"),
    (request(method="GET"), "invalid_method", "method"),
    (request(url="/v1/embeddings"), "mismatched_endpoint", "url"),
    (request(body="text"), "missing_required_parameter", "body"),
    (request(body={"messages": []}), "missing_required_parameter", "body.model"),
    (request(body={"model": "m", "stream": True}), "invalid_request", "body.stream"),
    (request(extra=1), "invalid_request", "extra"),
    (request(body={"model": "m", "messages": [{"role": "robot", "content": "Hi"}]}), "invalid_value", "body.messages[0].role"),
    (request(body={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "temperature": 9}), "decimal_above_max_value",
     "body.temperature"),
])
def test_a_wrong_line_is_named_with_its_number(raw: bytes, code: str, param: str | None) -> None:
    line = Checker("/v1/chat/completions").check(7, raw)
    assert line.body is None and line.error == {"code": code, "message": line.error["message"], "param": param, "line": 7}  # type: ignore[index]


def test_custom_ids_are_unique_and_the_model_is_the_first_lines() -> None:
    checker = Checker("/v1/chat/completions")
    assert checker.check(1, request("a")).error is None
    assert checker.check(2, request("a")).error["code"] == "duplicate_custom_id"  # type: ignore[index]
    other = request("b", body={"model": "other", "messages": [{"role": "user", "content": "Hi"}]})
    assert checker.check(3, other).error["code"] == "mismatched_model"  # type: ignore[index]
    assert checker.model == "m"


async def test_lines_are_read_as_the_file_streams_in_numbered_as_an_editor_counts_them() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for piece in (b'{"a"', b': 1}\n\n  \n{"b": 2}', b"\n", b'{"c": 3}'):
            yield piece

    lines = [(number, raw) async for number, raw in read_lines(FileContent(chunks(), 0, "f.jsonl"))]
    assert lines == [(1, b'{"a": 1}'), (4, b'{"b": 2}'), (5, b'{"c": 3}')]
