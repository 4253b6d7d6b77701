import logging

import pytest

from builder.plugins import PluginLoadError, installed_providers, load_spec, provider_names
from contract.spec import Api
from support import specimens


def test_a_provider_is_loaded_by_its_entry_point_name(specimen_providers: list[str]) -> None:
    assert load_spec(Api.inference, "remote") is specimens.INFERENCE_REMOTE


def test_names_are_listed_without_importing(specimen_providers: list[str]) -> None:
    assert {"remote", "local", "missing-module"} <= set(provider_names(Api.inference))


def test_an_unknown_provider_lists_the_installed_ones(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError) as error:
        load_spec(Api.inference, "nope")
    assert "unknown provider 'nope' for API 'inference' (installed: " in str(error.value)
    assert "remote" in str(error.value) and "local" in str(error.value)


def test_an_unknown_provider_is_the_error_alone_nothing_logged_or_printed(specimen_providers: list[str], caplog: pytest.LogCaptureFixture,
                                                                         capfd: pytest.CaptureFixture[str]) -> None:
    # stevedore's DriverManager drops `on_missing_entrypoints_callback`, so its own "Could not load
    # nope" WARNING came before the ConfigError `stack run` prints (issue 44).
    caplog.set_level(logging.INFO)
    with pytest.raises(PluginLoadError, match="unknown provider 'nope'"):
        load_spec(Api.inference, "nope")
    assert [record.getMessage() for record in caplog.records] == []
    assert capfd.readouterr() == ("", "")


def test_an_import_failure_names_the_entry_point_and_chains_the_cause(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError) as error:
        load_spec(Api.inference, "missing-module")
    message = str(error.value)
    assert "entry point 'missing-module' in group 'stack.providers.inference'" in message
    assert "ModuleNotFoundError" in message
    assert isinstance(error.value.__cause__, ModuleNotFoundError)


def test_an_entry_point_that_is_not_a_spec_is_rejected(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError, match=r"'dict' \(support\.specimens:NOT_A_SPEC\).* is a dict, expected a contract\.spec\.ProviderSpec"):
        load_spec(Api.inference, "dict")


def test_a_spec_must_carry_its_entry_point_name(specimen_providers: list[str]) -> None:
    with pytest.raises(PluginLoadError, match="declares name 'another-name', expected 'misnamed'"):
        load_spec(Api.inference, "misnamed")


def test_a_spec_registered_under_another_api_is_rejected(specimen_providers: list[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.plugins import forget_cached_entry_points
    from support.entry_points import write_distribution

    site = tmp_path_factory.mktemp("wrong-group")
    write_distribution(site, "wrong-group", {"stack.providers.files": {"remote": "support.specimens:INFERENCE_REMOTE"}})
    monkeypatch.syspath_prepend(str(site))
    forget_cached_entry_points()
    with pytest.raises(PluginLoadError, match="declares api 'inference', expected 'files'"):
        load_spec(Api.files, "remote")


def test_listing_includes_broken_providers_with_their_error(specimen_providers: list[str]) -> None:
    listing = {item.name: item for item in installed_providers(Api.inference)}
    assert listing["remote"].spec is specimens.INFERENCE_REMOTE
    assert listing["remote"].distribution == "stack-specimen-providers"
    assert listing["missing-module"].spec is None
    assert "ModuleNotFoundError" in (listing["missing-module"].error or "")
    assert "expected a contract.spec.ProviderSpec" in (listing["dict"].error or "")


def test_a_name_registered_by_two_packages_names_both(specimen_providers: list[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.plugins import forget_cached_entry_points
    from support.entry_points import write_distribution

    site = tmp_path_factory.mktemp("duplicate")
    write_distribution(site, "another-package", {"stack.providers.inference": {"remote": "support.specimens:INFERENCE_LOCAL"}})
    monkeypatch.syspath_prepend(str(site))
    forget_cached_entry_points()
    with pytest.raises(PluginLoadError) as error:
        load_spec(Api.inference, "remote")
    message = str(error.value)
    assert message.startswith("provider 'remote' is registered more than once in group 'stack.providers.inference': ")
    assert "(from another-package)" in message and "(from stack-specimen-providers)" in message
