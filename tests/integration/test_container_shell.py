"""OpenAI's hosted `shell` tool (a container environment) through the openai SDK, in server and
library modes: the model's commands run in a bubblewrap sandbox, a container of the containers API;
a `shell` without such an environment stays the client's."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

AUTO = {"type": "shell", "environment": {"type": "container_auto"}}


def ask(*commands: str, answer: str | None = None, **action: Any) -> str:
    directive = f"[tool:shell {json.dumps({'commands': list(commands), **action})}]"
    return directive + (f" [answer {json.dumps({'text': answer})}]" if answer is not None else "")


def test_the_commands_run_in_a_container_and_come_back_as_openais_two_items(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("echo hello > greeting.txt && cat greeting.txt", "ls nothing-here",
                                                                        answer="Done."), tools=[AUTO])
    call, output, message = response.output
    assert call.type == "shell_call" and call.status == "completed"
    assert call.action.commands == ["echo hello > greeting.txt && cat greeting.txt", "ls nothing-here"]
    assert call.environment is not None and call.environment.type == "container_reference"  # type: ignore[union-attr]
    container_id = call.environment.container_id  # type: ignore[union-attr]
    assert output.type == "shell_call_output" and output.call_id == call.call_id and output.status == "completed"
    first, second = output.output
    assert (first.stdout, first.stderr, first.outcome.type, first.outcome.exit_code) == ("hello\n", "", "exit", 0)  # type: ignore[union-attr]
    assert second.outcome.exit_code == 2 and "nothing-here" in second.stderr  # type: ignore[union-attr]
    assert message.content[0].text == "Done."  # type: ignore[union-attr]
    files = {file.path for file in openai_client.containers.files.list(container_id)}
    assert "/mnt/data/greeting.txt" in files
    assert response.tools[0].model_dump(exclude_none=True) == {"type": "shell", "environment": {"type": "container_auto", "file_ids": []}}


def test_the_model_reads_each_commands_output_and_exit_code(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("python3 -c 'print(6 * 7)'"), tools=[AUTO])
    assert response.output_text == "Tool result: 42\n\n(exit code 0)"


def test_a_chain_keeps_its_container(openai_client: openai.OpenAI, text_model: str) -> None:
    first = openai_client.responses.create(model=text_model, input=ask("echo kept > note.txt", answer="Saved."), tools=[AUTO])
    second = openai_client.responses.create(model=text_model, input=ask("cat note.txt"), tools=[AUTO], previous_response_id=first.id)
    assert second.output[0].environment.container_id == first.output[0].environment.container_id  # type: ignore[union-attr]
    assert second.output_text == "Tool result: kept\n\n(exit code 0)"


def test_a_named_container_is_shared_with_code_interpreter(openai_client: openai.OpenAI, text_model: str) -> None:
    container = openai_client.containers.create(name="shared")
    code = json.dumps({"code": "open('/mnt/data/from-python.txt', 'w').write('py')"})
    openai_client.responses.create(model=text_model, input=f"[tool:python {code}] [answer {{\"text\": \"ok\"}}]",
                                   tools=[{"type": "code_interpreter", "container": container.id}])
    reference = {"type": "shell", "environment": {"type": "container_reference", "container_id": container.id}}
    response = openai_client.responses.create(model=text_model, input=ask("cat from-python.txt"), tools=[reference])
    assert response.output_text == "Tool result: py\n(exit code 0)"  # (no newline at its end)


def test_a_command_past_its_timeout_ends_with_a_timeout_outcome(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("sleep 5", timeout_ms=300, answer="Slow."), tools=[AUTO])
    [entry] = response.output[1].output  # type: ignore[union-attr]
    assert entry.outcome.type == "timeout"


def test_a_streamed_call_has_openais_shell_events(openai_client: openai.OpenAI, text_model: str) -> None:
    with openai_client.responses.stream(model=text_model, input=ask("echo streamed", answer="Ok."), tools=[AUTO]) as stream:
        events = list(stream)
    kinds = [event.type for event in events if event.type.startswith("response.shell_call")]
    assert kinds == ["response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done",
                     "response.shell_call_output_content.delta", "response.shell_call_output_content.done"]
    done = next(event for event in events if event.type == "response.shell_call_output_content.done")
    assert done.output[0].stdout == "streamed\n"  # type: ignore[union-attr]


def test_a_shell_without_a_container_is_still_the_clients(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, input=ask("ls"), tools=[{"type": "shell"}])
    [call] = response.output
    assert call.type == "shell_call" and call.environment is None  # type: ignore[union-attr]  # waits for the client's output


@pytest.mark.parametrize(("environment", "param"), [
    ({"type": "container_reference", "container_id": "cntr_nosuch"}, "tools[0].environment.container_id"),
    ({"type": "container_auto", "memory_limit": "3g"}, "tools[0].environment.memory_limit"),
    ({"type": "container_auto", "skills": []}, "tools[0].environment.skills"),
])
def test_a_bad_environment_is_a_400_naming_it(openai_client: openai.OpenAI, text_model: str, environment: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model=text_model, input="hi", tools=[{"type": "shell", "environment": environment}])
    assert caught.value.param == param
