"""Encrypted reasoning and compaction: a reasoning item's content (or a compaction item's summary)
sealed with a key only the server holds, so a client that keeps no state on the server
(`store: false`) can send it back and the model reads it again, while the client can neither read
nor forge it.

AES-256-GCM (the `cryptography` package): a token is `v1.` and the URL-safe base64 of a random
96-bit nonce and the ciphertext with its tag. The associated data names the format, so a token
of anything else sealed with the same key is refused. A token that was altered, or sealed with
another key, is a 400 naming the item.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["ReasoningSeal", "check_sealed", "decode_key", "load_key"]

_PREFIX = "v1."
_AAD = b"stack reasoning item v1"
_COMPACTION_AAD = b"stack compaction item v1"  # a reasoning token is no compaction token, nor the reverse
KEY_FILE = "reasoning.key"


class ReasoningSeal:
    """Seals with the key `load_key` gives, read (and `cryptography` imported) on first use: a
    stack that never seals reasoning pays nothing at start-up."""

    def __init__(self, key: Callable[[], bytes]) -> None:
        self._key = key
        self._cipher: Any = None

    @property
    def _aead(self) -> Any:
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._key())
        return self._cipher

    def seal(self, item: Mapping[str, Any]) -> str:
        """The token of a reasoning item's content (and summary)."""
        return self._seal({"content": item.get("content") or [], "summary": item.get("summary") or []}, _AAD)

    def seal_compaction(self, summary: str) -> str:
        """The token of a compaction item: the summary that stands for the context it replaced."""
        return self._seal({"summary": summary}, _COMPACTION_AAD)

    def open(self, token: Any, param: str) -> dict[str, Any]:
        """The content and summary a reasoning token holds; a 400 naming `param` if it is not ours."""
        return self._open(token, param, _AAD)

    def open_compaction(self, token: Any, param: str) -> str:
        """The summary a compaction token holds; a 400 naming `param` if it is not ours."""
        return str(self._open(token, param, _COMPACTION_AAD).get("summary") or "")

    def reveal(self, item: Mapping[str, Any]) -> list[str]:
        """The text of an item that carries it only sealed (checked at the request's start): a
        reasoning item's reasoning, a compaction item's summary."""
        try:
            if item.get("type") == "compaction":
                return [self.open_compaction(item.get("encrypted_content"), "encrypted_content")]
            opened = self.open(item.get("encrypted_content"), "encrypted_content")
        except InvalidRequestError:
            return []
        parts = opened.get("content") or opened.get("summary") or []
        return [str(part.get("text", "")) for part in parts if isinstance(part, Mapping)]

    def _seal(self, payload: Mapping[str, Any], aad: bytes) -> str:
        plain = json.dumps(payload, separators=(",", ":"))
        nonce = os.urandom(12)
        sealed = nonce + self._aead.encrypt(nonce, plain.encode(), aad)
        return _PREFIX + base64.urlsafe_b64encode(sealed).decode()

    def _open(self, token: Any, param: str, aad: bytes) -> dict[str, Any]:
        from cryptography.exceptions import InvalidTag

        try:
            if not isinstance(token, str) or not token.startswith(_PREFIX):
                raise ValueError("not a token of this server")
            sealed = base64.urlsafe_b64decode(token[len(_PREFIX):].encode())
            plain = self._aead.decrypt(sealed[:12], sealed[12:], aad)
            opened = json.loads(plain)
        except (ValueError, InvalidTag, binascii.Error, UnicodeError):
            raise InvalidRequestError(f"The encrypted content of '{param.rsplit('.', 1)[0]}' could not be verified or decrypted: it was "
                                      "altered, or sealed by another server (or with another key).", param=param,
                                      code="invalid_encrypted_content") from None
        return opened if isinstance(opened, dict) else {}


def check_sealed(seal: ReasoningSeal | None, input_items: Sequence[Mapping[str, Any]]) -> None:
    """Encrypted reasoning (or a compaction) sent back must be this server's, unaltered: a 400
    naming the item if not."""
    for index, item in enumerate(input_items):
        compaction = item.get("type") == "compaction"
        if (item.get("type") == "reasoning" and item.get("encrypted_content") is not None) or compaction:
            if seal is None:
                raise InvalidRequestError(f"Encrypted content in 'input[{index}]' cannot be read: this server seals none.",
                                          param=f"input[{index}].encrypted_content", code="invalid_encrypted_content")
            opened = seal.open_compaction if compaction else seal.open
            opened(item.get("encrypted_content"), f"input[{index}].encrypted_content")


def decode_key(text: str) -> bytes:
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ValueError("expected 32 bytes in base64 (e.g. the output of `openssl rand -base64 32`)")
    return key


def load_key(configured: str | None, state_dir: Path) -> bytes:
    """The key from run.yaml (32 bytes, base64), else the one this state directory keeps (made on
    first use, readable by its owner only). Replicas must share a configured key."""
    if configured:
        return decode_key(configured)
    path = state_dir / KEY_FILE
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(base64.b64encode(os.urandom(32)))
    return base64.b64decode(path.read_bytes().strip())
