"""A route's own body limit, for a path as the route declares it, `{name}` segments and all."""

from __future__ import annotations

from runtime.http.body_limits import RouteLimits

LIMITS = RouteLimits({("POST", "/v1/files"): 100, ("POST", "/v1/containers/{container_id}/files"): 200})


def test_an_exact_path_and_a_templated_one_each_have_their_limit() -> None:
    assert LIMITS.limit("POST", "/v1/files", 10) == 100
    assert LIMITS.limit("POST", "/v1/containers/cntr_1/files", 10) == 200


def test_other_methods_paths_and_empty_segments_have_the_default() -> None:
    assert LIMITS.limit("GET", "/v1/containers/cntr_1/files", 10) == 10
    assert LIMITS.limit("POST", "/v1/containers//files", 10) == 10
    assert LIMITS.limit("POST", "/v1/containers/cntr_1/files/cfile_1", 10) == 10
    assert not RouteLimits() and LIMITS
