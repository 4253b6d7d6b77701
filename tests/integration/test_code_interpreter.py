"""The `code_interpreter` tool through the openai SDK, in server and library modes: the model's turns
are replayed, the code runs for real in a bubblewrap sandbox (a container of the containers API)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from runtime.testing.targets import open_target
from support.live import CONFIG, live_env
from support.live_stack import run_yaml, served
from support.sandbox import runtime_python

AUTO = {"type": "code_interpreter", "container": {"type": "auto"}}


def ask(code: str, answer: str | None = None) -> str:
    directive = f"[tool:python {json.dumps({'code': code})}]"
    return directive + (f" [answer {json.dumps({'text': answer})}]" if answer is not None else "")


def test_the_code_runs_and_its_output_is_shown_when_asked(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("x = 6 * 7\nprint('x is', x)\nx + 1", "It is 42."),
                                              tools=[AUTO], include=["code_interpreter_call.outputs"])
    call, message = response.output
    assert call.type == "code_interpreter_call" and call.status == "completed"
    assert call.code == "x = 6 * 7\nprint('x is', x)\nx + 1"
    assert call.container_id.startswith("cntr_")
    assert [output.model_dump() for output in call.outputs or ()] == [{"type": "logs", "logs": "x is 42\n43\n"}]
    assert message.type == "message" and message.content[0].text == "It is 42."  # type: ignore[union-attr]
    assert response.tools[0].model_dump(exclude_none=True) == {"type": "code_interpreter", "container": {"type": "auto", "file_ids": []}}
    container = openai_client.containers.retrieve(call.container_id)
    assert container.status == "running" and container.name == f"code_interpreter {response.id}"
    # Without `include` the outputs are null; they are kept, and shown when a retrieval asks.
    assert openai_client.responses.retrieve(response.id).output[0].outputs is None  # type: ignore[union-attr]
    again = openai_client.responses.retrieve(response.id, include=["code_interpreter_call.outputs"])
    assert again.output[0].model_dump() == call.model_dump()


def test_the_model_reads_what_the_code_printed(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("print(sum(range(10)))"), tools=[AUTO])
    assert response.output_text == "Tool result: 45"


def test_a_chain_keeps_its_container_and_names(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input=ask("total = 40", "Stored."), tools=[AUTO])
    second = openai_client.responses.create(model=text_model, input=ask("print(total + 2)"), tools=[AUTO],
                                            previous_response_id=first.id)
    assert second.output[0].container_id == first.output[0].container_id  # type: ignore[union-attr]
    assert second.output_text == "Tool result: 42"


def test_a_container_gone_mid_chain_is_replaced_and_the_model_told(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input=ask("total = 40", "Stored."), tools=[AUTO])
    gone = first.output[0].container_id  # type: ignore[union-attr]
    openai_client.containers.delete(gone)
    second = openai_client.responses.create(model=text_model, input=ask("print('total' in globals())"), tools=[AUTO],
                                            previous_response_id=first.id)
    assert second.output[0].container_id not in (gone, "")  # type: ignore[union-attr]
    assert second.output_text.startswith("Tool result: The container used before expired")
    assert second.output_text.endswith("False")


def test_a_streamed_call_has_openais_events_in_order(openai_client: openai.OpenAI, text_model: str) -> None:
    with openai_client.responses.stream(model=text_model, input=ask("print(1 + 1)", "Two."), tools=[AUTO],
                                        include=["code_interpreter_call.outputs"]) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    start = kinds.index("response.output_item.added")
    assert kinds[start:start + 7] == [
        "response.output_item.added", "response.code_interpreter_call.in_progress", "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed", "response.output_item.done"]
    added, done = events[start], events[start + 6]
    assert added.item.status == "in_progress" and added.item.code == ""  # type: ignore[union-attr]
    assert events[start + 2].delta == "print(1 + 1)" and events[start + 3].code == "print(1 + 1)"  # type: ignore[union-attr]
    assert done.item.status == "completed" and done.item.outputs[0].logs == "2\n"  # type: ignore[union-attr]
    assert kinds[-1] == "response.completed"


def test_files_go_in_and_the_files_code_writes_come_out_cited(openai_client: openai.OpenAI, text_model: str) -> None:
    data = openai_client.files.create(file=("sales.csv", io.BytesIO(b"month,units\nJan,12\nFeb,30\n")), purpose="user_data")
    code = ("import pandas as pd\nimport matplotlib.pyplot as plt\nframe = pd.read_csv('/mnt/data/sales.csv')\n"
            "frame.plot(x='month', y='units')\nplt.savefig('/mnt/data/chart.png')\nprint(frame.units.sum())")
    response = openai_client.responses.create(
        model=text_model, input=ask(code, "Units: 42. The chart: [chart](sandbox:/mnt/data/chart.png)."),
        tools=[{"type": "code_interpreter", "container": {"type": "auto", "file_ids": [data.id]}}],
        include=["code_interpreter_call.outputs"])
    call, message = response.output
    assert call.outputs is not None  # type: ignore[union-attr]
    logs, image = call.outputs  # type: ignore[union-attr]
    assert logs.logs == "42\n" and image.type == "image" and image.url.startswith("data:image/png;base64,")  # type: ignore[union-attr]
    [part] = message.content  # type: ignore[union-attr]
    [annotation] = part.annotations  # type: ignore[union-attr]
    assert annotation.type == "container_file_citation" and annotation.filename == "chart.png"
    assert part.text[annotation.start_index:annotation.end_index] == "sandbox:/mnt/data/chart.png"  # type: ignore[union-attr]
    files = {file.path: file for file in openai_client.containers.files.list(call.container_id)}  # type: ignore[union-attr]
    assert files["/mnt/data/sales.csv"].source == "user" and files["/mnt/data/chart.png"].source == "assistant"
    assert files["/mnt/data/chart.png"].id == annotation.file_id
    png = openai_client.containers.files.content.retrieve(annotation.file_id, container_id=annotation.container_id).read()
    assert png.startswith(b"\x89PNG")


def test_a_named_container_is_used(openai_client: openai.OpenAI, text_model: str) -> None:
    container = openai_client.containers.create(name="mine")
    response = openai_client.responses.create(model=text_model, input=ask("print('here')", "Done."),
                                              tools=[{"type": "code_interpreter", "container": container.id}])
    assert response.output[0].container_id == container.id  # type: ignore[union-attr]
    assert response.tools[0].container == container.id  # type: ignore[union-attr]


def test_code_that_raises_completes_with_its_traceback(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("1 / 0"), tools=[AUTO],
                                              include=["code_interpreter_call.outputs"])
    call = response.output[0]
    assert call.status == "completed"  # type: ignore[union-attr]
    assert "ZeroDivisionError: division by zero" in call.outputs[0].logs  # type: ignore[union-attr, index]
    assert "ZeroDivisionError" in response.output_text


@pytest.mark.parametrize(("container", "param"), [
    ("cntr_nosuch", "tools[0].container"),
    ({"type": "auto", "memory_limit": "2g"}, "tools[0].container.memory_limit"),
    ({"type": "auto", "file_ids": ["file-nosuch"]}, "tools[0].container.file_ids"),
    ({"type": "auto", "network_policy": {"type": "allowlist", "allowed_domains": ["example.org"]}},
     "tools[0].container.network_policy.allowed_domains"),  # this stack's operator allows no hosts
    ({"type": "auto", "network_policy": {"type": "open"}}, "tools[0].container.network_policy"),
    ({"type": "manual"}, "tools[0].container"),
])
def test_a_bad_container_is_a_400_naming_it(openai_client: openai.OpenAI, text_model: str, container: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model=text_model, input="hi", tools=[{"type": "code_interpreter", "container": container}])
    assert caught.value.param == param


def test_a_background_response_runs_its_code(openai_client: openai.OpenAI, text_model: str) -> None:
    created = openai_client.responses.create(model=text_model, input=ask("print(2 ** 10)", "1024."), tools=[AUTO], background=True,
                                             include=["code_interpreter_call.outputs"])
    deadline = time.monotonic() + 30
    response = created
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        response = openai_client.responses.retrieve(created.id, include=["code_interpreter_call.outputs"])
    assert response.status == "completed"
    assert response.output[0].outputs[0].logs == "1024\n"  # type: ignore[union-attr, index]


def test_a_conversation_keeps_its_container(openai_client: openai.OpenAI, text_model: str) -> None:
    conversation = openai_client.conversations.create()
    first = openai_client.responses.create(model=text_model, input=ask("seen = ['a']", "Noted."), tools=[AUTO],
                                           conversation=conversation.id)
    second = openai_client.responses.create(model=text_model, input=ask("seen.append('b'); print(seen)"), tools=[AUTO],
                                            conversation=conversation.id)
    assert second.output[0].container_id == first.output[0].container_id  # type: ignore[union-attr]
    assert second.output_text == "Tool result: ['a', 'b']"
    items = openai_client.conversations.items.list(conversation.id)
    assert [item.type for item in items].count("code_interpreter_call") == 2


@pytest.fixture(scope="module")
def websocket_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """The integration stack served over HTTP (WebSocket mode is the server's), in front of the live fake upstream."""
    with running_fake_upstream() as upstream:
        env = live_env(upstream, tmp_path_factory.mktemp("ws"))
        with open_target(f"server:{CONFIG}", rootdir=Path(__file__).resolve().parents[2], env=env) as target:
            client = target.openai(max_retries=0)
            yield client
            client.close()


def test_a_call_over_a_websocket_has_the_events_of_a_stream(websocket_client: openai.OpenAI, text_model: str) -> None:
    with websocket_client.responses.connect() as connection:
        connection.response.create(model=text_model, input=ask("print(3 * 3)", "Nine."), tools=[AUTO],
                                   include=["code_interpreter_call.outputs"])
        events = []
        for event in connection:
            events.append(event)
            if event.type in ("response.completed", "response.failed", "error"):
                break
    kinds = [event.type for event in events]
    assert kinds[-1] == "response.completed"
    assert "response.code_interpreter_call.interpreting" in kinds and "response.code_interpreter_call.completed" in kinds
    done = next(event for event in events if event.type == "response.output_item.done" and event.item.type == "code_interpreter_call")
    assert done.item.outputs[0].logs == "9\n"  # type: ignore[union-attr]


NETWORKED = """  sandboxes: [{provider_id: bubblewrap, provider_type: bubblewrap, config: {python: "%s", allowed_hosts: ["localhost:%d"],
                                                                            allow_private: [localhost]}}]
  containers: [{provider_id: builtin, provider_type: builtin}]
  tool_runtime: [{provider_id: code_interpreter, provider_type: code_interpreter}]
"""


@pytest.fixture(scope="module")
def networked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, int]]:
    """A stack whose sandboxes' operator allows one host: the live fake upstream's (on 127.0.0.1, hence allow_private),
    which is also its model."""
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("networked"), upstream.base_url, providers=NETWORKED % (runtime_python(), upstream.port), name="networked")
        with served("server", path) as client:
            yield client, upstream.port


def test_code_in_a_container_with_an_allowlist_reaches_the_allowed_host_only(networked: tuple[openai.OpenAI, int],
                                                                           text_model: str) -> None:
    client, port = networked
    code = ("import urllib.request\n"
            f"print(urllib.request.urlopen('http://localhost:{port}/v1/models', timeout=10).status)\n"
            "try:\n    urllib.request.urlopen('http://example.com/', timeout=10)\nexcept Exception as error:\n    print(error)")
    container = {"type": "auto", "network_policy": {"type": "allowlist", "allowed_domains": ["localhost"]}}
    response = client.responses.create(model=text_model, input=ask(code), tools=[{"type": "code_interpreter", "container": container}])
    assert response.output_text == "Tool result: 200\nHTTP Error 403: Forbidden"
    assert response.tools[0].container.network_policy.model_dump(exclude_none=True) == container["network_policy"]  # type: ignore[union-attr]
    made = client.containers.retrieve(response.output[0].container_id)  # type: ignore[union-attr]
    assert made.network_policy is not None and made.network_policy.allowed_domains == ["localhost"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=text_model, input="hi", tools=[{"type": "code_interpreter", "container": {
            "type": "auto", "network_policy": {"type": "allowlist", "allowed_domains": ["example.com"]}}}])
    assert refused.value.param == "tools[0].container.network_policy.allowed_domains"
