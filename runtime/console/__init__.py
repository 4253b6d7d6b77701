"""The web console (`/console`): a playground and every stored object browsable, in the server
itself. Nothing here is imported until the console's first request (`mount.ConsoleGate`); its
pages read and write through the API itself, in process, as the signed-in principal
(`runtime.http.loopback`), so they show what the API would show that principal and nothing more."""
