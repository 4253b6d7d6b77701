"""A provider package installed with pip is used from run.yaml with no other step;
a broken one stops start-up with a message naming its entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.errors import ConfigError
from builder.load import parse_config
from builder.plugins import PluginLoadError, installed_providers
from builder.resolve import resolve
from contract.spec import Api
from runtime.library_client import LibraryClient
from runtime.testing.targets import running_server


def run_yaml(tmp_path: Path, provider_type: str, config: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        f"""
name: plugin-test
state_dir: {tmp_path / 'state'}
providers:
  safety:
    - provider_id: words
      provider_type: {provider_type}
      config: {config}
"""
    )
    return path


def cli(*args: str, site: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], env=env, capture_output=True, text=True, timeout=60)


def test_the_installed_plugin_is_listed_with_its_distribution(installed_plugins: Path) -> None:
    listing = {p.name: p for p in installed_providers(Api.safety)}
    assert listing["keyword-filter"].distribution == "stack-example-plugin"
    assert listing["keyword-filter"].spec is not None
    assert "ModuleNotFoundError" in (listing["broken-filter"].error or "")


def test_stack_list_providers_shows_the_plugin_and_marks_the_broken_one(plugin_site: Path) -> None:
    result = cli("list-providers", "safety", site=plugin_site)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines()}
    assert "stack-example-plugin" in lines["keyword-filter"]
    assert "Flags text that contains any of a list of blocked words" in lines["keyword-filter"]
    assert "BROKEN: ModuleNotFoundError" in lines["broken-filter"]


def test_the_plugin_runs_from_run_yaml_with_its_lifecycle(installed_plugins: Path, tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    path = run_yaml(tmp_path, "keyword-filter", f"{{blocked_words: [Forbidden], audit_log: {audit}}}")
    with LibraryClient(path, env={}) as stack:
        impl = stack.stack.impls[Api.safety]
        assert impl.flagged("this is forbidden") and not impl.flagged("this is fine")
        assert impl.guardrails.names == ("words",)  # what a Responses request's `guardrails` may name
        moderation = stack.openai().moderations.create(input=["this is forbidden", "this is fine"])
        assert [result.flagged for result in moderation.results] == [True, False]
        providers = stack.openai().get("/providers", cast_to=object)
        assert providers["data"][0]["provider_type"] == "keyword-filter"  # type: ignore[index]
        assert audit.read_text() == "words started\n"
    assert audit.read_text() == "words started\nwords stopped\n"


def test_the_plugin_config_is_validated_by_its_own_model(installed_plugins: Path, tmp_path: Path) -> None:
    path = run_yaml(tmp_path, "keyword-filter", "{blocked_words: [x], blocked: [y]}")
    with pytest.raises(ConfigError, match=r"providers\.safety\[0\]\.config\.blocked: unknown key \(expected one of: audit_log, blocked_words\)"):
        LibraryClient(path, env={})


def test_a_broken_plugin_stops_resolution_naming_the_entry_point(installed_plugins: Path) -> None:
    document = {"providers": {"safety": [{"provider_id": "b", "provider_type": "broken-filter"}]}}
    with pytest.raises(PluginLoadError) as error:
        resolve(parse_config(document, {}), {})
    assert str(error.value).startswith(
        "providers.safety[0].provider_type: provider 'broken-filter' (entry point 'broken-filter' in group "
        "'stack.providers.safety') failed to load: ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'"
    )
    assert isinstance(error.value.__cause__, ModuleNotFoundError)


def test_stack_run_with_a_broken_plugin_exits_with_one_clear_line(plugin_site: Path, tmp_path: Path) -> None:
    path = run_yaml(tmp_path, "broken-filter", "{}")
    result = cli("run", str(path), site=plugin_site)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {path}: providers.safety[0].provider_type: provider 'broken-filter' (entry point")
    assert "Traceback" not in result.stderr


def test_the_plugin_serves_under_stack_run_and_shuts_down_on_sigterm(plugin_site: Path, tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    path = run_yaml(tmp_path, "keyword-filter", f"{{blocked_words: [x], audit_log: {audit}}}")
    env = dict(os.environ, PYTHONPATH=str(plugin_site))
    with running_server(str(path), env=env) as base_url:
        import httpx2

        body = httpx2.get(f"{base_url}/providers").json()
        assert [p["provider_id"] for p in body["data"]] == ["words"]
    assert audit.read_text() == "words started\nwords stopped\n"
