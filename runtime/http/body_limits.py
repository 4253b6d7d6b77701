"""The request body limits some routes have of their own (file uploads), by method and path: a
path as a route declares it, whose `{name}` segments match any one segment of a request's path
(`/v1/containers/{container_id}/files` has one limit for every container)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RouteLimits"]


class RouteLimits:
    __slots__ = ("exact", "templated")

    def __init__(self, limits: Mapping[tuple[str, str], int] | None = None) -> None:
        limits = limits or {}
        self.exact = {key: limit for key, limit in limits.items() if "{" not in key[1]}
        self.templated = [(method, path.split("/"), limit) for (method, path), limit in limits.items() if "{" in path]

    def __bool__(self) -> bool:
        return bool(self.exact or self.templated)

    def limit(self, method: str, path: str, default: int) -> int:
        """The limit of a request to `method` `path`: its route's own, else `default`."""
        found = self.exact.get((method, path))
        if found is not None:
            return found
        if self.templated:
            segments = path.split("/")
            for verb, template, limit in self.templated:
                if verb == method and len(template) == len(segments) and all(
                        part == segment or (part.startswith("{") and segment) for part, segment in zip(template, segments)):
                    return limit
        return default
