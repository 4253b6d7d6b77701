"""The Messages API's routes (Anthropic's `POST /v1/messages`)."""
