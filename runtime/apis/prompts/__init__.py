"""The prompts API: versioned prompt templates, used by the `prompt` parameter of Responses."""
