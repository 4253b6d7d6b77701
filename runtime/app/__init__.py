"""The app over a started stack, which the server and the library client both run: the routes of
the served APIs, the system routes every stack serves (`system_routes`: health, version, providers,
routes), authentication, metrics and tracing put together (`stack_app`), and the OpenAPI document
as the server behaves (`openapi`)."""
