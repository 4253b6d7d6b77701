"""The Responses API's contract: what a responses provider implements, and the create-response
request and response objects as OpenAI shapes them."""
