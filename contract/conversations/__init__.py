"""The Conversations API's contract: what a conversations provider implements."""
