"""Scenarios run against more than one stack (e.g. SQLite and PostgreSQL storage)."""

from __future__ import annotations

import asyncio

import openai


def concurrent_turns_keep_their_blocks(client: openai.AsyncOpenAI, turns: int) -> None:
    """`turns` responses of three input items each, created at once on one conversation: each
    must append its three inputs and its answer as one contiguous block, in order."""

    async def scenario() -> list[str]:
        conversation = await client.conversations.create()
        await asyncio.gather(*(
            client.responses.create(model="fake-model", conversation=conversation.id,
                                    input=[{"role": "user", "content": f"r{r} part {p}"} for p in range(3)])
            for r in range(turns)
        ))
        page = client.conversations.items.list(conversation.id, order="asc", limit=100)
        return [item.content[0].text async for item in page]  # type: ignore[union-attr]

    texts = asyncio.run(scenario())
    assert len(texts) == turns * 4
    for start in range(0, len(texts), 4):
        tag = texts[start].split()[0]
        assert texts[start:start + 4] == [f"{tag} part 0", f"{tag} part 1", f"{tag} part 2", f"You said: {tag} part 2"]
    assert sorted(texts[start].split()[0] for start in range(0, len(texts), 4)) == sorted(f"r{r}" for r in range(turns))
