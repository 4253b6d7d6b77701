"""The hosted shell reads the model's call generously and each command's result strictly: what the
kernel printed is the command's JSON line, or else the kernel's own failure."""

from __future__ import annotations

import json

from providers.tool_runtime.code_interpreter.shell import DEFAULT_OUTPUT, DEFAULT_TIMEOUT_MS, _action, _entry


def test_an_action_takes_the_commands_and_limits_the_model_wrote() -> None:
    assert _action(json.dumps({"commands": ["ls", "pwd"], "timeout_ms": 500, "max_output_length": 20})) == {
        "commands": ["ls", "pwd"], "timeout_ms": 500, "max_output_length": 20}


def test_a_single_command_string_malformed_json_and_wild_limits_are_read_safely() -> None:
    assert _action(json.dumps({"commands": "ls"}))["commands"] == ["ls"]
    assert _action("not json") == {"commands": [], "timeout_ms": DEFAULT_TIMEOUT_MS, "max_output_length": DEFAULT_OUTPUT}
    wild = _action(json.dumps({"commands": ["ls", 3], "timeout_ms": -1, "max_output_length": 10**9}))
    assert wild == {"commands": ["ls"], "timeout_ms": DEFAULT_TIMEOUT_MS, "max_output_length": DEFAULT_OUTPUT}


def test_an_entry_is_the_last_json_line_the_kernel_printed() -> None:
    line = json.dumps({"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}})
    assert _entry(f"noise\n{line}\n", "completed") == json.loads(line)


def test_a_kernel_timeout_or_failure_becomes_the_commands_outcome() -> None:
    assert _entry("KeyboardInterrupt", "timeout") == {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}
    assert _entry("MemoryError", "failed") == {"stdout": "", "stderr": "MemoryError", "outcome": {"type": "exit", "exit_code": 1}}
