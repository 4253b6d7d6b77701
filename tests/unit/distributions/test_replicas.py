"""distributions/replicas: its run.yaml resolves, and compose.yaml and nginx.conf agree with it
(the port, the variables it reads, a stop grace period longer than the server's)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import yaml

from builder.resolve import load_plan

HERE = Path(__file__).resolve().parents[3] / "distributions" / "replicas"
KEY = base64.b64encode(bytes(32)).decode()


def test_the_run_yaml_resolves_to_shared_storage_and_two_workers() -> None:
    plan = load_plan("replicas", {"STACK_REASONING_KEY": KEY, "OPENAI_API_KEY": "k"})
    storage = plan.config.storage
    assert storage.backends["shared"].type == "postgres"
    assert {getattr(storage.stores, name) for name in ("responses", "conversations", "files", "metadata")} == {"shared"}
    assert plan.config.server.workers == 2 and plan.config.server.host == "0.0.0.0"
    assert plan.config.server.auth is not None and plan.config.server.auth.quotas is not None


def test_compose_and_nginx_agree_with_the_run_yaml() -> None:
    run = (HERE / "run.yaml").read_text()
    compose = yaml.safe_load((HERE / "compose.yaml").read_text())
    stack = compose["services"]["stack"]
    variables = set(re.findall(r"\$\{env\.([A-Z_]+)", run))
    assert {"STACK_POSTGRES_DSN", "STACK_REDIS_URL", "STACK_REASONING_KEY"} <= variables
    assert {"STACK_POSTGRES_DSN", "STACK_REDIS_URL", "STACK_REASONING_KEY"} <= set(stack["environment"])
    plan = load_plan("replicas", {"STACK_REASONING_KEY": KEY})
    nginx = (HERE / "nginx.conf").read_text()
    assert f"server stack:{plan.config.server.port}" in nginx
    assert "proxy_buffering off" in nginx and "Upgrade $http_upgrade" in nginx
    grace = int(stack["stop_grace_period"].rstrip("s"))
    assert grace > plan.config.server.shutdown_grace_s
