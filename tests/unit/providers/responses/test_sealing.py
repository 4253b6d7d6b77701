"""Sealed reasoning: what the server seals it can open, and nothing else."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from providers.responses.sealing import ReasoningSeal, decode_key, load_key
from contract.errors import InvalidRequestError

ITEM = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Thinking."}], "summary": []}


def test_a_sealed_item_opens_to_its_content_and_reveals_its_text() -> None:
    seal = ReasoningSeal(lambda: b"s" * 32)
    token = seal.seal(ITEM)
    assert token.startswith("v1.") and "Thinking" not in token and token != seal.seal(ITEM)  # a fresh nonce each time
    assert seal.open(token, "input[0].encrypted_content")["content"] == ITEM["content"]
    assert seal.reveal({"encrypted_content": token}) == ["Thinking."]


@pytest.mark.parametrize("token", ["v1.AAAA", "v2." + "A" * 40, "", "v1.!!!", None])
def test_anything_but_a_token_of_this_key_is_a_400(token: object) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        ReasoningSeal(lambda: b"s" * 32).open(token, "input[3].encrypted_content")
    assert refused.value.param == "input[3].encrypted_content" and refused.value.code == "invalid_encrypted_content"
    other = ReasoningSeal(lambda: b"o" * 32).seal(ITEM)
    with pytest.raises(InvalidRequestError):
        ReasoningSeal(lambda: b"s" * 32).open(other, "x")


def test_the_key_comes_from_config_or_is_made_once_per_state_directory(tmp_path: Path) -> None:
    configured = base64.b64encode(b"c" * 32).decode()
    assert load_key(configured, tmp_path) == b"c" * 32 and not (tmp_path / "reasoning.key").exists()
    made = load_key(None, tmp_path)
    assert len(made) == 32 and load_key(None, tmp_path) == made
    with pytest.raises(ValueError, match="32 bytes"):
        decode_key(base64.b64encode(b"short").decode())
