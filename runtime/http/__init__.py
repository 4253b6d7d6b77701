"""HTTP machinery the routes stand on: routes declared without FastAPI (`routing`) and called
without it (`direct_routes`), the one middleware (`middleware`: request ids, body limits, the
last-resort 500), FastAPI's errors in OpenAI's shape (`errors`), form bodies (`forms`),
server-sent events (`sse`) and a client's departure (`departure`). Each API's own routes are in
`runtime.apis`; the app over a started stack is `runtime.app`."""
