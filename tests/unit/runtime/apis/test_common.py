"""What the routes of every API share: list pages and the JSON responses they are sent in."""

from __future__ import annotations

import json

from contract import fastjson
from runtime.apis.common import JSONBytes
from contract.checks import cursor_page
from contract.items import ItemText


def test_a_page_of_items_kept_as_text_is_sent_as_the_same_document_as_their_dicts() -> None:
    items = [{"id": f"msg_{n}", "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"é \"{n}\" \\ 🙂"}]}
             for n in range(3)]
    as_text = [ItemText(item["id"], fastjson.dumps(item).decode()) for item in items]
    mixed = [as_text[0], items[1], as_text[2]]
    for data in (as_text, mixed):
        page = cursor_page(data, has_more=True)
        assert (page["first_id"], page["last_id"]) == ("msg_0", "msg_2")
        body = JSONBytes(page).body
        assert json.loads(body) == {"object": "list", "data": items, "first_id": "msg_0", "last_id": "msg_2", "has_more": True}
        assert list(json.loads(body)) == ["object", "data", "first_id", "last_id", "has_more"]  # the page's own key order


def test_pages_of_dicts_and_other_documents_are_written_as_they_are() -> None:
    assert JSONBytes(cursor_page([], has_more=False)).body == b'{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}'
    assert JSONBytes({"data": "not a list"}).body == b'{"data":"not a list"}'
    assert JSONBytes([1, 2]).body == b"[1,2]"
