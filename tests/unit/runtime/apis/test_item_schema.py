"""The items' schema in the OpenAPI document (runtime/apis/item_schema.py) says what
`contract.items.normalize_item` takes: every item made from the schema is taken exactly when the
schema declares it valid (the document's bodies are held to their routes the same way, with a
stack, in tests/integration/test_openapi_bodies.py)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from contract.errors import InvalidRequestError
from contract.items import normalize_item
from runtime.apis.item_schema import IMAGE_URL_PATTERN, item_schema
from support.schema_instances import breaches, samples


def _taken(item: Any) -> bool:
    """As a conversation takes an item: checked, and not a reference (providers/conversations)."""
    try:
        return normalize_item(item, "items[0]")["type"] != "item_reference"
    except InvalidRequestError:
        return False


def test_an_item_is_taken_exactly_when_its_schema_allows_it() -> None:
    schema = item_schema(response=False)
    validator = Draft202012Validator(schema)
    made = [*samples(schema), *breaches(schema)]
    wrong = [item for item in made if validator.is_valid(item) != _taken(item)]
    assert not wrong, wrong[:5]
    assert sum(map(validator.is_valid, made)) > 100 and sum(not validator.is_valid(item) for item in made) > 50


def test_a_conversation_takes_no_reference_and_responses_need_a_compaction_sealed() -> None:
    stored = Draft202012Validator(item_schema(response=False))
    answered = Draft202012Validator(item_schema(response=True))
    assert not stored.is_valid({"type": "item_reference", "id": "msg_1"}) and answered.is_valid({"type": "item_reference", "id": "msg_1"})
    assert stored.is_valid({"type": "compaction"}) and not answered.is_valid({"type": "compaction"})
    assert answered.is_valid({"type": "compaction", "encrypted_content": "token"})


def test_an_image_url_is_checked_as_the_server_checks_it() -> None:
    validator = Draft202012Validator({"type": "string", "pattern": IMAGE_URL_PATTERN})
    for url in ("https://example.com/cat.png", "http://x", "data:image/png;base64,iVBORw0KGgo=", "data:IMAGE/JPEG;base64,/9j/4AAQ",
                "data:image/png;base64,QQ=="):
        assert validator.is_valid(url) and _taken({"role": "user", "content": [{"type": "input_image", "image_url": url}]}), url
    for url in ("ftp://x", "data:image/tiff;base64,QUJD", "data:image/png,QUJD", "data:image/png;base64,", "data:image/png;base64,QUJ",
                "data:image/png;base64,QU!D"):
        assert not validator.is_valid(url) and not _taken({"role": "user", "content": [{"type": "input_image", "image_url": url}]}), url
