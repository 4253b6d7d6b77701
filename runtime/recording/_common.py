"""Types and constants shared by the recording modules."""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias, get_args

RecordingMode = Literal["live", "record", "replay", "record-if-missing"]
MODES: Final[tuple[RecordingMode, ...]] = get_args(RecordingMode)

MODE_ENV: Final = "STACK_RECORDING_MODE"
DIR_ENV: Final = "STACK_RECORDINGS_DIR"

Json: TypeAlias = Any
Chunk: TypeAlias = str | dict[str, str]
