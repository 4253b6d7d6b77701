"""Whether the namespace's NetworkPolicies shut the sandboxes' pods off the network.

A pod has the network unless a policy that selects it lists `Egress` in its `policyTypes`; then it
may reach what the egress rules of every policy that selects it allow (they add up). So the pods
have no network when one selecting policy has the `Egress` type and none has an egress rule. A
selector with `matchExpressions` is not evaluated here: such a policy counts as selecting the pods
when it allows anything (it might), and as not selecting them otherwise. Whether the cluster's
network plugin enforces policies at all cannot be seen from the API.
"""

from __future__ import annotations

from typing import Any

__all__ = ["egress_problem"]


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool | None:
    """True or False, or None when the selector has expressions this does not evaluate."""
    selector = (policy.get("spec") or {}).get("podSelector") or {}
    if selector.get("matchExpressions"):
        return None
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def egress_problem(policies: list[dict[str, Any]], labels: dict[str, str], namespace: str) -> str | None:
    """None when the policies deny the pods every egress; else what is wrong, said."""
    denying, allowing = False, []
    for policy in policies:
        spec = policy.get("spec") or {}
        selects = _selects(policy, labels)
        if selects is not False and spec.get("egress"):
            allowing.append(str((policy.get("metadata") or {}).get("name")))
        if selects and "Egress" in (spec.get("policyTypes") or ()):
            denying = True
    if allowing:
        return f"the NetworkPolicies {', '.join(allowing)} in {namespace!r} may allow the sandboxes' pods some egress"
    if not denying:
        return (f"no NetworkPolicy in {namespace!r} denies the sandboxes' pods egress (one that selects "
                f"{labels!r} with policyTypes [Egress] and no egress rule)")
    return None
