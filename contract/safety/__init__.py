"""The safety API's contract: moderation in OpenAI's shape, and the guardrails a provider offers."""
