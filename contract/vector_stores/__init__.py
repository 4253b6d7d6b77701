"""The Vector stores API's contract: what a vector stores provider implements, and its request
bodies checked as OpenAI checks them."""
