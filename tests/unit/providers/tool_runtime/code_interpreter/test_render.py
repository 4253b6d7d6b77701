"""How a code_interpreter_call item reads to the model: a pure function of the stored item, so a
chain replayed from the store gives the model what it read live."""

from __future__ import annotations

import json

from providers.tool_runtime.code_interpreter import MAX_LOGS_TO_MODEL, CodeInterpreterRuntime


def render(**item: object) -> tuple[str | None, str | None, str | None]:
    runtime = CodeInterpreterRuntime(None, None)  # type: ignore[arg-type]  # render reads only the item
    exchange = runtime.render({"id": "ci_1", "type": "code_interpreter_call", "code": "print(1)", "container_id": "cntr_1", **item})
    assert exchange is not None
    return exchange.name, exchange.arguments, exchange.output


def test_the_call_is_the_python_function_with_its_code() -> None:
    name, arguments, output = render(status="completed", outputs=[{"type": "logs", "logs": "1\n"}])
    assert (name, json.loads(arguments or "")) == ("python", {"code": "print(1)"})
    assert output == "1\n"


def test_images_files_and_notes_are_told_in_words() -> None:
    _, _, output = render(status="completed", note="The kernel was restarted.",
                          outputs=[{"type": "logs", "logs": "done"}, {"type": "image", "url": "data:image/png;base64,AAAA"}],
                          files=[{"id": "cfile_1", "container_id": "cntr_1", "path": "/mnt/data/plot.png"}])
    assert output == "The kernel was restarted.\ndone\n[1 image shown to the user]\nFiles written: sandbox:/mnt/data/plot.png"


def test_a_silent_cell_a_timeout_and_a_failure_each_say_so() -> None:
    assert render(status="completed", outputs=[])[2] == "(The code ran and printed nothing.)"
    assert render(status="incomplete", outputs=[{"type": "logs", "logs": "partial"}])[2] == "partial\nThe code ran out of time and was stopped."
    assert render(status="failed", outputs=None, note="No container could be made.")[2] == "No container could be made.\nThe code could not be run."


def test_long_logs_are_cut_for_the_model() -> None:
    output = render(status="completed", outputs=[{"type": "logs", "logs": "x" * (MAX_LOGS_TO_MODEL + 10)}])[2] or ""
    assert output.endswith("\n[... output cut]") and len(output) == MAX_LOGS_TO_MODEL + len("\n[... output cut]")


def test_a_replayed_item_of_any_shape_still_renders() -> None:
    runtime = CodeInterpreterRuntime(None, None)  # type: ignore[arg-type]
    exchange = runtime.render({"type": "code_interpreter_call", "code": None, "outputs": "junk", "files": 3})
    assert exchange is not None and exchange.output == "(The code ran and printed nothing.)"
