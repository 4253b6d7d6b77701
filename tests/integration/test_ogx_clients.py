"""OGX's clients as users migrating from OGX bring them, unchanged.

`llama-stack-client` (now `ogx-client`) with no key configured sends no Authorization header,
uploads files as multipart, and sends `embedding_dimension` as OGX's own tests do. It is no test
dependency (it pulls pandas, prompt-toolkit and rich, and the package index here serves only a
2025 release that still calls OGX's old `/v1/openai/v1/...` paths), so its requests are made here
as it shapes them: by the `openai` SDK, which the same generator (Stainless) makes, with its
User-Agent and without the key. A deployment migrating from OGX may also keep OGX's default
approval policy for a request's own MCP servers (`never`), with `default_require_approval`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from builder.load import parse_config
from builder.resolve import StackPlan, resolve
from fake_mcp.servers import McpServers
from runtime.library_client import LibraryClient

REPO = Path(__file__).resolve().parents[2]
OGX_CLIENT = {"authorization": openai.Omit(), "user-agent": "LlamaStackClient/Python 0.7.5", "x-stainless-package-version": "0.7.5"}
"""What llama-stack-client sends besides the X-Stainless headers the openai SDK sends too: no key."""


def test_a_file_uploaded_as_llama_stack_client_uploads_it_without_a_key_is_stored(openai_client: openai.OpenAI) -> None:
    uploaded = openai_client.post("/files", cast_to=httpx2.Response, body={"purpose": "assistants"},
                                  files=[("file", ("light.txt", b"The harbour light is green.", "text/plain"))],
                                  options={"headers": {**OGX_CLIENT, "content-type": "multipart/form-data"}}).json()
    assert (uploaded["object"], uploaded["filename"], uploaded["bytes"]) == ("file", "light.txt", 27)
    assert openai_client.files.content(uploaded["id"]).content == b"The harbour light is green."
    # The store OGX's tests make over it: its embedding model, and the size of its vectors as a string.
    created = openai_client.post("/vector_stores", cast_to=httpx2.Response, options={"headers": OGX_CLIENT}, body={
        "name": "ogx", "file_ids": [uploaded["id"]], "embedding_model": "fake-embed", "embedding_dimension": "384",
        "provider_id": "builtin"}).json()
    assert created["file_counts"]["completed"] == 1, created
    found = openai_client.vector_stores.search(vector_store_id=created["id"], query="The harbour light is green.",
                                               extra_body={"search_mode": "vector"})  # by its 384-dimension vectors
    assert [hit.file_id for hit in found.data] == [uploaded["id"]]


@pytest.mark.parametrize("dimension", ["3.5", "1e3", " 384", "-1", "0"])
def test_an_embedding_dimension_that_is_no_plain_integer_is_a_400_naming_it(openai_client: openai.OpenAI, dimension: str) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client.vector_stores.create(name="ogx", extra_body={"embedding_model": "fake-embed", "embedding_dimension": dimension})
    assert bad.value.body == {"message": "Invalid 'embedding_dimension': expected an integer from 1 to 16000.",
                              "type": "invalid_request_error", "param": "embedding_dimension", "code": "invalid_value"}


def _plan(state: Path, default_require_approval: str) -> StackPlan:
    """A stack whose MCP runtime has OGX's default approval policy; the model replayed from
    recordings/ as in the rest of the suite, the MCP servers live."""
    env = dict(os.environ, STACK_STATE_DIR=str(state))
    inference = os.environ.get("STACK_TEST_INFERENCE_URL") or "http://127.0.0.1:9/v1"
    mcp_config = {"allow_private": ["127.0.0.1"], "default_require_approval": default_require_approval,
                  "servers": [{"server_label": "configured", "server_url": os.environ["STACK_TEST_MCP_URL"]}]}
    document = {
        "version": 1, "name": "ogx-approvals", "recording": {"directory": str(REPO / "recordings"), "providers": {"mcp": "live"}},
        "providers": {
            "inference": [{"provider_id": "fake", "provider_type": "openai", "config": {"base_url": inference, "api_key": "k"}}],
            "responses": [{"provider_id": "builtin", "provider_type": "builtin"}],
            "tool_runtime": [{"provider_id": "mcp", "provider_type": "mcp", "config": mcp_config}],
        },
    }
    return resolve(parse_config(document, env), env)


def test_a_deployment_can_keep_ogxs_default_approval_for_request_mcp_servers(tmp_path: Path, mcp_servers: McpServers) -> None:
    tool: Any = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open}  # no require_approval, as OGX's clients
    with LibraryClient(_plan(tmp_path, "never")) as stack:
        client = stack.openai(max_retries=0)
        ran = client.responses.create(model="fake-model", input='[tool:echo {"text": "hi"}]', tools=[tool])
        assert [item.type for item in ran.output] == ["mcp_list_tools", "mcp_call", "message"]
        assert ran.output_text == "Tool result: echo: hi"
        # The request's own policy wins; a configured server keeps its own (here none: OpenAI's always).
        asked: Any
        for asked in ({**tool, "require_approval": "always"}, {"type": "mcp", "server_label": "configured"}):
            held = client.responses.create(model="fake-model", input='[tool:echo {"text": "hi"}]', tools=[asked])
            assert [item.type for item in held.output] == ["mcp_list_tools", "mcp_approval_request"]
            assert json.loads(held.output[1].model_dump()["arguments"]) == {"text": "hi"}
    with LibraryClient(_plan(tmp_path / "openai", "always")) as stack:  # OpenAI's default, the default
        held = stack.openai(max_retries=0).responses.create(model="fake-model", input='[tool:echo {"text": "hi"}]', tools=[tool])
        assert [item.type for item in held.output] == ["mcp_list_tools", "mcp_approval_request"]
