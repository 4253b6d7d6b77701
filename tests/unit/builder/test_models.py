"""run.yaml's `models:` with deployments, routing and fallbacks: every mistake a config error
naming its YAML path, before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from builder.errors import ConfigError
from builder.load import parse_config
from builder.resolve import StackPlan, resolve

PROVIDERS = {"inference": [{"provider_id": name, "provider_type": "openai", "config": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                                                     "api_key": "k"}}
                           for name, port in (("a", 9001), ("b", 9002))]}


def plan(*models: dict[str, Any]) -> StackPlan:
    return resolve(parse_config({"providers": PROVIDERS, "models": list(models)}, {}), {})


def test_a_model_with_deployments_and_fallbacks_resolves() -> None:
    resolved = plan({"model_id": "m", "deployments": [{"provider_id": "a", "provider_model_id": "x", "weight": 2},
                                                      {"provider_id": "b", "max_concurrency": 4, "tags": ["eu"]}],
                     "routing": {"strategy": "prefix_affinity", "attempts": 2}, "fallbacks": ["n", "b/other"]},
                    {"model_id": "n", "provider_id": "b"})
    model = resolved.models[0]
    assert [d.provider_id for d in model.served_by()] == ["a", "b"] and model.routing.strategy == "prefix_affinity"
    assert model.routed() and not resolved.models[1].routed()


@pytest.mark.parametrize(("model", "message"), [
    ({"model_id": "m", "deployments": [{"provider_id": "a"}, {"provider_id": "zz"}]},
     r"^models\[0\]\.deployments\[1\]\.provider_id: 'zz' is not an inference provider \(inference providers: a, b\)"),
    ({"model_id": "m", "provider_id": "zz"}, r"^models\[0\]\.provider_id: 'zz' is not an inference provider"),
    ({"model_id": "m", "deployments": [{"provider_id": "a"}], "fallbacks": ["nowhere"]},
     r"^models\[0\]\.fallbacks\[0\]: 'nowhere' is not a model of this stack"),
    ({"model_id": "m", "deployments": [{"provider_id": "a", "weight": 0}]}, r"models\[0\]\.deployments\[0\]\.weight"),
    ({"model_id": "m", "deployments": [{"provider_id": "a"}], "routing": {"strategy": "fastest"}}, r"models\[0\]\.routing\.strategy"),
    ({"model_id": "m", "provider_id": "a", "deployments": [{"provider_id": "b"}]}, r"either provider_id .* or deployments, not both"),
    ({"model_id": "m"}, r"provider_id or deployments is required"),
])
def test_a_mistake_names_its_path(model: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(model)


def test_a_fallback_cycle_is_refused_with_the_cycle() -> None:
    with pytest.raises(ConfigError, match=r"^models\[0\]\.fallbacks: the fallbacks go round in a cycle: m -> n -> o -> m$"):
        plan({"model_id": "m", "provider_id": "a", "fallbacks": ["n"]}, {"model_id": "n", "provider_id": "b", "context_window_fallbacks": ["o"]},
             {"model_id": "o", "provider_id": "a", "content_policy_fallbacks": ["m"]})
