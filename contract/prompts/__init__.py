"""The prompts API's contract: what a prompts provider implements, and the template rules every
provider shares."""
