"""Record and replay upstream HTTP traffic at the httpx2 transport seam.

Every remote provider gets its `httpx2.AsyncClient` from the stack, which builds it with
`recording_transport(inner, mode, directory)`. Recording therefore wraps the wire itself: no SDK
class is patched and nothing here knows about any provider.

Modes:
    live               the inner transport itself, untouched
    record             forward every request upstream and (over)write its recording
    replay             answer from recordings only; the upstream is never contacted
    record-if-missing  replay what is recorded, forward and record what is not

Key: sha256 over the canonical request (`request_key`): method, URL path (no scheme, host or port;
trailing slash stripped; query sorted) and body (JSON normalised, floats to 6 significant digits;
other bodies by their sha256). Headers are left out, so API keys and hosts do not matter.

One file per exchange, `<path-slug>-<hash12>.json`, in one flat directory; pretty JSON (indent 2,
sorted keys):

    {"request":  {"method": "POST", "path": "/v1/chat/completions", "body": {...}},
     "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": {...}}}

The response carries exactly one of `body` (parsed JSON, for JSON content types), `text` (other
UTF-8 bodies), `body_base64` (anything else) or, for `text/event-stream`, `chunks`: each SSE event's
data string in order (`[DONE]` included), or `{"event": name, "data": ...}` for events with a name.
A stream that ended abnormally also has `stream_error`: `"<httpx2 error class>: <message>"`; replay
yields the same chunks and then raises that error (a `RemoteProtocolError` when the class is not an
httpx2 transport error). Only the content-type and retry-after* headers are kept.

A stream the caller closes before its end is recorded as far as it was read, with
`stream_error: "closed by client"`, unless `[DONE]` was already seen (SDKs stop reading there):
replaying it past that point then fails loudly instead of silently returning a truncated answer.
A non-stream body that fails or is abandoned midway is not recorded at all.

Layout: `keys` (the request key and file names), `store` (the recordings directory and file format),
`replay` (`ReplayTransport` and miss diagnostics), `record` (`RecordingTransport`); this package
re-exports the public API and picks the transport for a mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx2

from runtime.recording._common import DIR_ENV, MODE_ENV, RecordingMode
from runtime.recording._common import MODES as MODES  # public, though not in __all__
from runtime.recording.keys import request_key
from runtime.recording.record import CLOSED_BY_CLIENT as CLOSED_BY_CLIENT  # public, though not in __all__
from runtime.recording.record import RecordingTransport
from runtime.recording.replay import ReplayMissError, ReplayTransport

__all__ = [
    "DIR_ENV",
    "MODE_ENV",
    "RecordingMode",
    "RecordingTransport",
    "ReplayMissError",
    "ReplayTransport",
    "default_mode",
    "recording_transport",
    "request_key",
]


# --- modes -----------------------------------------------------------------------------------


def default_mode(env: Mapping[str, str], default: RecordingMode = "live") -> RecordingMode:
    """The mode named by `STACK_RECORDING_MODE` in `env`, or `default` when unset or empty.

    Raises ValueError, listing the valid modes, for any other value.
    """
    value = env.get(MODE_ENV, "").strip()
    if not value:
        return default
    return _check_mode(value, source=MODE_ENV)


def _check_mode(value: str, source: str = "mode") -> RecordingMode:
    if value not in MODES:
        raise ValueError(f"{source}={value!r} is not a recording mode; valid modes: {', '.join(MODES)}")
    return value


def recording_transport(
    inner: httpx2.AsyncBaseTransport, mode: RecordingMode, directory: Path
) -> httpx2.AsyncBaseTransport:
    """Wrap `inner` (the transport that reaches the upstream) for `mode`, recording under `directory`.

    live: `inner` itself. record: a `RecordingTransport` that overwrites. record-if-missing: a
    `RecordingTransport` that replays existing recordings. replay: a `ReplayTransport`, which never
    sends anything through `inner` (it only closes it).
    """
    mode = _check_mode(mode)
    if mode == "live":
        return inner
    if mode == "replay":
        return ReplayTransport(directory, owned=inner)
    return RecordingTransport(inner, directory, overwrite=mode == "record")
