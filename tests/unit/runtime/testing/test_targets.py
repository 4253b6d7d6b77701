"""The `--stack-config` values the pytest plugin accepts, each opened for real."""

from pathlib import Path

import pytest

from builder.errors import ConfigError
from runtime.testing.targets import free_port, open_target, running_server


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(f"name: target\nstate_dir: {tmp_path / 'state'}\n")
    return path


def test_library_mode_runs_the_app_in_process(tmp_path: Path) -> None:
    with open_target(f"library:{config_file(tmp_path)}") as target:
        assert target.mode == "library" and target.library is not None
        assert target.openai().get("/health", cast_to=object) == {"status": "ok", "providers": {}, "storage": {}}


def test_provider_pairs_build_a_stack_from_sample_configs(installed_plugins: Path) -> None:
    with open_target("safety=keyword-filter") as target:
        body = target.openai().get("/providers", cast_to=object)
        [provider] = body["data"]  # type: ignore[index]
        assert (provider["api"], provider["provider_type"], provider["config"]["blocked_words"]) == ("safety", "keyword-filter", ["forbidden"])


def test_a_bad_pair_is_a_config_error(installed_plugins: Path) -> None:
    with pytest.raises(ConfigError, match="'safety': expected api=provider"):
        with open_target("safety=keyword-filter,safety"):
            pass


def test_server_mode_on_a_port_and_url_mode_reuse_a_running_server(tmp_path: Path) -> None:
    port = free_port()
    with open_target(f"server:{config_file(tmp_path)}:{port}") as server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        with open_target(f"http://127.0.0.1:{port}") as url, running_server("unused", port) as reused:
            assert url.openai().get("/health", cast_to=object) == {"status": "ok", "providers": {}, "storage": {}}
            assert reused == server.base_url


def test_an_unrecognised_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="expected server:..., library:..., http://host:port or api=provider"):
        with open_target("starter"):
            pass
