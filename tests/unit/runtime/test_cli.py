import gc
from pathlib import Path

import pytest

from runtime.cli import main


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "build", "list-apis", "list-providers", "list-distributions"):
        assert command in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: stack" in capsys.readouterr().out


def test_list_apis_names_every_api(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-apis"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "inference  (several providers, routed by model)"
    assert {"responses", "conversations", "files", "safety", "tool_runtime", "vector_stores"} <= {line.split()[0] for line in lines}


def test_list_distributions_shows_starter_and_its_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-distributions"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("starter "))
    assert line.endswith("distributions/starter/run.yaml")


def test_list_providers_of_an_unknown_api_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-providers", "chat"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: api: unknown API 'chat' (expected one of: inference,")
    assert err.count("\n") == 1


def test_run_with_a_bad_config_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("server:\n  port: eighty\n")
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: server.port: Input should be a valid integer")
    assert err.count("\n") == 1


def test_run_of_an_unknown_distribution_says_which_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "startr"]) == 1
    assert "no distribution of that name (distributions: " in capsys.readouterr().err


def test_the_collector_is_on_again_after_a_command_even_a_failed_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Commands run with it off (start-up speed); a caller of main() in its own process gets it back.
    assert main(["list-apis"]) == 0
    assert gc.isenabled()
    bad = tmp_path / "run.yaml"
    bad.write_text("version: 1\nproviders: {inference: 7}\n")
    assert main(["run", str(bad)]) == 1
    assert gc.isenabled()
    capsys.readouterr()


def test_a_reader_that_goes_away_ends_the_listing_without_a_traceback() -> None:
    # `stack list-providers | head -1`: the pipe's reader closes it before the listing is written.
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "runtime.cli", "list-providers"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(timeout=30) == 1
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
