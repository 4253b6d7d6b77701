"""Anthropic's Messages API (`POST /v1/messages`) served over any chat-completions model."""
