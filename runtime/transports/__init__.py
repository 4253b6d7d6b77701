"""HTTP transports: the one way providers get outbound clients (`clients`: pooled, address-guarded,
recorded and replayed in tests), the keep-alive transport under them (`fast`), and the in-process
transport the library client reaches the app through (`asgi`)."""
