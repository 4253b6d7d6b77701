"""The Messages API's contract (Anthropic's `POST /v1/messages`)."""
