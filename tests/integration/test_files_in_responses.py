"""Files named by id in a response's input: the model reads them (text, a PDF's text, an image);
the stored input keeps the ids."""

from __future__ import annotations

import io

import openai
import pytest

from fake_mcp.servers import PNG
from support.documents import pdf_with_text


def upload(client: openai.OpenAI, name: str, data: bytes) -> str:
    return client.files.create(file=(name, io.BytesIO(data)), purpose="user_data").id


def test_a_text_file_and_a_pdf_are_read_by_the_model(openai_client: openai.OpenAI, text_model: str) -> None:
    text_id = upload(openai_client, "notes.md", b"The keeper is called Anna.")
    pdf_id = upload(openai_client, "report.pdf", pdf_with_text("Revenue grew eight percent"))
    response = openai_client.responses.create(model=text_model, input=[{"role": "user", "content": [
        {"type": "input_file", "file_id": text_id}, {"type": "input_file", "file_id": pdf_id},
        {"type": "input_text", "text": "Summarise."},
    ]}])
    # The fake model repeats what it read: both files' text reached it, each with its name.
    assert response.output_text == ("You said: [File: notes.md]\nThe keeper is called Anna.[File: report.pdf]\n"
                                    "Revenue grew eight percent" "Summarise.")
    [stored] = openai_client.responses.input_items.list(response.id).data
    assert [part.file_id for part in stored.content[:2]] == [text_id, pdf_id]  # type: ignore[union-attr]
    follow = openai_client.responses.create(model=text_model, input="And?", previous_response_id=response.id)
    assert follow.usage is not None and response.usage is not None and follow.usage.input_tokens > response.usage.input_tokens


def test_an_image_file_reaches_the_model_as_an_image(openai_client: openai.OpenAI, text_model: str) -> None:
    image_id = upload(openai_client, "dot.png", PNG)
    response = openai_client.responses.create(model=text_model, input=[{"role": "user", "content": [
        {"type": "input_image", "file_id": image_id, "detail": "low"}, {"type": "input_text", "text": "What is this?"},
    ]}])
    assert response.output_text == "You said: What is this?"  # the image went as an image part, not as text


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "input_file", "file_id": "file-missing"}, None),
    ({"type": "input_image", "file_id": "TEXT"}, "input[0].content[0].file_id"),
])
def test_files_that_cannot_be_read_are_client_errors(openai_client: openai.OpenAI, text_model: str, part: dict[str, str],
                                                     param: str | None) -> None:
    if part["file_id"] == "TEXT":
        part = {**part, "file_id": upload(openai_client, "plain.txt", b"not an image")}
    with pytest.raises((openai.NotFoundError, openai.BadRequestError)) as error:
        openai_client.responses.create(model=text_model, input=[{"role": "user", "content": [part]}])
    if param is not None:
        assert error.value.status_code == 400 and getattr(error.value, "param", None) == param  # type: ignore[union-attr]
    else:
        assert error.value.status_code == 404  # type: ignore[union-attr]


def test_chat_file_parts_naming_a_file_id_carry_the_file(openai_client: openai.OpenAI, text_model: str) -> None:
    text_id = upload(openai_client, "notes.md", b"The keeper is called Anna.")
    image_id = upload(openai_client, "dot.png", PNG)
    completion = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_id": text_id}}, {"type": "file", "file": {"file_id": image_id}},
        {"type": "text", "text": "Who?"},
    ]}])
    # The fake model repeats the text parts it read: the file's, headed by its name; the image went as an image.
    assert completion.choices[0].message.content == "You said: [File: notes.md]\nThe keeper is called Anna.Who?"
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-missing"}}]}])
