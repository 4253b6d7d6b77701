"""The checks a tool's container setting passes when a request comes (code_interpreter's
`container`, the hosted shell's `environment`), each failure a 400 naming the field; and how a
new container's network reads in the function's description."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from contract.containers.checks import check_network_policy
from contract.containers.protocol import ContainersProvider
from contract.errors import InvalidRequestError, NotFoundError
from contract.files.protocol import FilesProvider
from contract.sandboxes.network import check_allowed_domains
from contract.sandboxes.protocol import MEMORY_TIERS

__all__ = ["AUTO_FIELDS", "check_auto", "check_container_id", "with_network"]

AUTO_FIELDS = frozenset({"type", "file_ids", "memory_limit", "network_policy"})
NO_INTERNET = "there is no internet access"


async def check_container_id(containers: ContainersProvider, container_id: str, where: str) -> None:
    try:
        await containers.get_container(container_id)  # an expired one is replaced when used
    except NotFoundError:
        raise InvalidRequestError(f"Invalid '{where}': no container found with id '{container_id[:80]}'.", param=where,
                                  code="invalid_value") from None


async def check_auto(containers: ContainersProvider, files: FilesProvider | None, setting: Mapping[str, Any], where: str,
                     fields: Collection[str] = AUTO_FIELDS) -> None:
    """A new container's setting: its fields, memory tier, network (within the operator's hosts) and files (the caller's)."""
    for key in setting:
        if key not in fields:
            raise InvalidRequestError(f"Unknown parameter: '{where}.{key}'.", param=f"{where}.{key}", code="unknown_parameter")
    limit = setting.get("memory_limit")
    if limit is not None and limit not in MEMORY_TIERS:
        raise InvalidRequestError(f"Invalid value for '{where}.memory_limit': expected one of {', '.join(MEMORY_TIERS)}.",
                                  param=f"{where}.memory_limit", code="invalid_value")
    domains = check_network_policy(setting.get("network_policy"), f"{where}.network_policy")
    if domains is not None:
        check_allowed_domains(list(domains), containers.allowed_hosts, f"{where}.network_policy.allowed_domains")
    file_ids = setting.get("file_ids")
    if file_ids is None:
        return
    if not isinstance(file_ids, list) or not all(isinstance(file_id, str) and file_id for file_id in file_ids):
        raise InvalidRequestError(f"Invalid '{where}.file_ids': expected an array of file ids.", param=f"{where}.file_ids",
                                  code="invalid_value")
    for index, file_id in enumerate(file_ids):
        try:
            if files is None:
                raise NotFoundError(file_id)
            await files.get_file(file_id)
        except NotFoundError:
            raise InvalidRequestError(f"Invalid '{where}.file_ids[{index}]': no file found with id '{file_id[:80]}'.",
                                      param=f"{where}.file_ids", code="invalid_value") from None


def with_network(description: str, setting: Any) -> str:
    """`description` (which says NO_INTERNET) naming the hosts a new container of `setting` may reach, if it allows any."""
    policy = setting.get("network_policy") if isinstance(setting, Mapping) else None
    domains = check_network_policy(policy, "network_policy")
    if not domains:
        return description
    return description.replace(NO_INTERNET, "the internet is reachable only at " + ", ".join(domains)
                               + " (through a proxy that HTTP_PROXY and HTTPS_PROXY name: urllib and requests use it)")
