"""The server process: uvicorn over the app (`serve`), the HTTP/1.1 protocol with the limits on
receiving a request (`http_protocol`), and N processes on one port (`workers`). The library client
runs the same app without any of this."""
