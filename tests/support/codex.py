"""What the Codex CLI sends that several tests (and bench/grammars.py) replay."""

from __future__ import annotations

# Codex's apply_patch grammar (codex-rs, tool_apply_patch.lark), as it sends it in a custom tool:
# its `/(.*)/` terminals match the empty string, which the `lark` package refuses and OpenAI's
# engine (llguidance) takes.
APPLY_PATCH_GRAMMAR = r'''
start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
'''
