from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from builder.errors import ConfigError
from builder.load import find_config, is_active, list_distributions, load_config, parse_config


def test_a_minimal_document_gets_defaults() -> None:
    config = parse_config({"name": "mini"}, {})
    assert config.name == "mini"
    assert config.server.port == 8321
    assert config.providers == {}
    assert config.storage.stores.responses == "default"


def test_an_empty_file_is_a_valid_empty_stack(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("")
    assert load_config(path, {}).name == "stack"


def test_env_values_are_converted_by_the_schema() -> None:
    config = parse_config({"server": {"port": "${env.PORT:=9000}"}}, {})
    assert config.server.port == 9000


def test_unknown_key_names_its_path_and_the_allowed_keys() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"server": {"prot": 1}}, {})
    message = str(error.value)
    assert message.startswith("server.prot: unknown key")
    assert "port" in message and "host" in message


def test_unknown_top_level_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^provider: unknown key \(expected one of: .*providers"):
        parse_config({"provider": {}}, {})


def test_wrong_type_names_the_path_the_value_and_what_was_expected() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"server": {"port": "eighty"}}, {})
    message = str(error.value)
    assert message.startswith("server.port: ")
    assert "integer" in message and "'eighty'" in message


def test_a_provider_entry_missing_its_type_is_reported_at_its_index() -> None:
    with pytest.raises(ConfigError, match=r"^providers\.inference\[1\]\.provider_type: required setting is missing"):
        parse_config({"providers": {"inference": [
            {"provider_id": "a", "provider_type": "x"},
            {"provider_id": "b"},
        ]}}, {})


def test_duplicate_provider_ids_in_one_api_are_rejected() -> None:
    with pytest.raises(ConfigError, match="provider_id 'a' is used twice under inference"):
        parse_config({"providers": {"inference": [
            {"provider_id": "a", "provider_type": "x"},
            {"provider_id": "a", "provider_type": "y"},
        ]}}, {})


def test_storage_backends_are_discriminated_by_type() -> None:
    config = parse_config({"storage": {"backends": {
        "local": {"type": "sqlite", "path": "/tmp/x.db"},
        "pg": {"type": "postgres", "dsn": "postgresql://u@h/db"},
    }}}, {})
    assert isinstance(config.storage.backends["local"], SqliteBackend)
    assert isinstance(config.storage.backends["pg"], PostgresBackend)


def test_a_typo_inside_a_storage_backend_names_the_backend_keys() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"storage": {"backends": {"local": {"type": "sqlite", "paht": "/x"}}}}, {})
    message = str(error.value)
    assert "storage.backends.local" in message and "paht" in message


def test_an_unknown_backend_type_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"storage\.backends\.x"):
        parse_config({"storage": {"backends": {"x": {"type": "mongodb"}}}}, {})


def test_a_missing_env_var_is_reported_with_its_yaml_path(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("server:\n  host: ${env.BIND_HOST}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, {})
    assert str(error.value) == (
        f"{path}: server.host: environment variable BIND_HOST is not set "
        "(set it, or write ${env.BIND_HOST:=default} to give a default)"
    )


def test_the_config_of_an_inactive_provider_is_not_substituted() -> None:
    document = {"providers": {"inference": [{
        "provider_id": "vllm", "provider_type": "vllm",
        "enabled_if_env": ["VLLM_URL"],
        "config": {"base_url": "${env.VLLM_URL}"},
    }]}}
    config = parse_config(document, {})
    entry = config.providers["inference"][0]
    assert not is_active(entry, {})
    assert entry.config == {"base_url": "${env.VLLM_URL}"}
    active = parse_config(document, {"VLLM_URL": "http://gpu:8000/v1"}).providers["inference"][0]
    assert is_active(active, {"VLLM_URL": "http://gpu:8000/v1"})
    assert active.config == {"base_url": "http://gpu:8000/v1"}


def test_parse_config_does_not_modify_the_document_it_is_given() -> None:
    document = {"providers": {"inference": [{
        "provider_id": "v", "provider_type": "v", "enabled_if_env": ["NOPE"], "config": {"a": "${env.NOPE}"},
    }]}}
    parse_config(document, {})
    assert document["providers"]["inference"][0]["config"] == {"a": "${env.NOPE}"}


def test_invalid_yaml_is_reported_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match=f"^{path}: not valid YAML"):
        load_config(path, {})


def test_a_document_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match="expected a mapping of settings, got list"):
        parse_config([1, 2], {})


def test_distributions_are_found_by_name_and_paths_as_given(tmp_path: Path) -> None:
    assert "starter" in list_distributions()
    assert find_config("starter").name == "run.yaml"
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\n")
    assert find_config(path) == path
    assert find_config(tmp_path / "mine.yaml") == path


def test_an_unknown_distribution_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no-such-thing: no such file, and no distribution of that name \(distributions: .*starter"):
        find_config("no-such-thing")


@pytest.mark.parametrize(("auth", "path"), [
    ({"api_keys": [{"principal": "a", "key": "sk-0123456789", "key_sha256": "0" * 64}]}, "server.auth.api_keys[0]"),
    ({"api_keys": [{"principal": "a", "key_sha256": "not-a-hash"}]}, "server.auth.api_keys[0].key_sha256"),
    ({"jwt": {"issuer": "x"}}, "server.auth.jwt"),
    ({}, "server.auth"),
])
def test_an_auth_mistake_names_its_path(auth: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"server": {"auth": auth}}, {})
    assert str(error.value).startswith(path), str(error.value)


def test_auth_keys_may_come_from_the_environment() -> None:
    config = parse_config({"server": {"auth": {"api_keys": [{"principal": "a", "key": "${env.TEAM_KEY}"}]}}}, {"TEAM_KEY": "sk-team-0123456"})
    assert config.server.auth is not None and config.server.auth.api_keys[0].key == "sk-team-0123456"


@pytest.mark.parametrize(("key", "value"), [("header_timeout_s", 0), ("body_timeout_s", -1), ("max_header_bytes", 100)])
def test_the_limits_on_receiving_a_request_are_bounded(key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=rf"^server\.{key}: "):
        parse_config({"server": {key: value}}, {})
    assert parse_config({}, {}).server.model_dump(include={"header_timeout_s", "body_timeout_s", "max_header_bytes"}) == {
        "header_timeout_s": 10.0, "body_timeout_s": 60.0, "max_header_bytes": 65536}
