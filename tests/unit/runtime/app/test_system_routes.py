from runtime.app.system_routes import REDACTED, redact


def test_secret_looking_keys_are_masked_at_any_depth() -> None:
    config = {"base_url": "http://x", "api_key": "sk-123", "auth": {"password": "p", "token": "t"}, "headers": [{"Authorization": "Bearer z"}]}
    assert redact(config) == {
        "base_url": "http://x",
        "api_key": REDACTED,
        "auth": {"password": REDACTED, "token": REDACTED},
        "headers": [{"Authorization": REDACTED}],
    }


def test_unset_secrets_stay_visibly_unset() -> None:
    assert redact({"api_key": None, "secret": ""}) == {"api_key": None, "secret": ""}


def test_passwords_inside_dsns_are_masked() -> None:
    assert redact({"dsn": "postgresql://app:s3cret@db:5432/stack"}) == {"dsn": f"postgresql://app:{REDACTED}@db:5432/stack"}
    assert redact({"dsn": "postgresql://app@db/stack"}) == {"dsn": "postgresql://app@db/stack"}


def test_header_values_are_masked_whatever_their_names() -> None:
    config = {"servers": [{"server_label": "g", "headers": {"X-Api-Key": "k", "X-Org": "7"}, "authorization": "t"}]}
    assert redact(config) == {"servers": [{"server_label": "g", "headers": {"X-Api-Key": REDACTED, "X-Org": REDACTED},
                                           "authorization": REDACTED}]}


def test_token_counts_are_not_taken_for_secrets() -> None:
    config = {"context_tokens": 2048, "max_tokens": 800, "quotas": {"tokens_per_minute": 10}, "access_token": "t", "hf_token": 5}
    assert redact(config) == {"context_tokens": 2048, "max_tokens": 800, "quotas": {"tokens_per_minute": 10}, "access_token": REDACTED,
                              "hf_token": REDACTED}
