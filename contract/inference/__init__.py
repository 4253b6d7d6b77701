"""The inference API's contract: what an inference provider implements (chat completions,
embeddings, models), with bodies in OpenAI's wire format."""
