"""In-process cost of translating a streamed chat answer into Anthropic's Messages events
(`providers/messages/stream.py`): a 64-chunk answer fed to `MessageStream`, best of 7 rounds of
500. For comparing a change to the translation with its base (run it with each checkout first on
the path); `bench/ab.py . . --messages B --stream` measures the whole request.

    .venv/bin/python bench/messages_stream.py [CHECKOUT]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))

from contract import fastjson  # noqa: E402
from providers.messages.stream import MessageStream  # noqa: E402

CHUNKS = [fastjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                          "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}) for i in range(64)]


def main() -> None:
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(500):
            stream = MessageStream("m")
            stream.start()
            for chunk in CHUNKS:
                stream.feed(fastjson.loads(chunk))
            stream.finish()
        best = min(best, (time.perf_counter() - started) / 500 * 1e6)
    print(f"{best:.1f} µs per 64-chunk stream")


if __name__ == "__main__":
    main()
