"""The inference API: chat completions, embeddings and models, routed by model across providers."""
