import pytest

from builder.envsubst import substitute
from builder.errors import ConfigError


def test_a_set_variable_is_substituted_inside_a_string() -> None:
    assert substitute("http://${env.HOST}:8000/v1", {"HOST": "gpu-1"}) == "http://gpu-1:8000/v1"


def test_a_default_applies_when_the_variable_is_unset_or_empty() -> None:
    assert substitute("${env.PORT:=8321}", {}) == "8321"
    assert substitute("${env.PORT:=8321}", {"PORT": ""}) == "8321"
    assert substitute("${env.PORT:=8321}", {"PORT": "9000"}) == "9000"


def test_an_empty_default_gives_an_empty_string() -> None:
    assert substitute("${env.KEY:=}", {}) == ""


def test_nested_documents_are_walked_and_other_values_kept() -> None:
    document = {"a": [{"b": "${env.X}"}, 3, None, True], "c": "plain"}
    assert substitute(document, {"X": "y"}) == {"a": [{"b": "y"}, 3, None, True], "c": "plain"}


def test_a_missing_required_variable_names_the_variable_and_the_yaml_path() -> None:
    document = {"providers": {"inference": [{"config": {"api_key": "${env.OPENAI_API_KEY}"}}]}}
    with pytest.raises(ConfigError) as error:
        substitute(document, {})
    message = str(error.value)
    assert message.startswith("providers.inference[0].config.api_key: ")
    assert "OPENAI_API_KEY is not set" in message


def test_a_malformed_reference_is_an_error_not_left_in_place() -> None:
    with pytest.raises(ConfigError, match=r"server\.host: malformed reference '\$\{env\.HOST-NAME\}'"):
        substitute({"server": {"host": "${env.HOST-NAME}"}}, {})


def test_the_environment_is_a_parameter_not_read_from_the_process() -> None:
    assert substitute("${env.PATH:=none}", {}) == "none"
