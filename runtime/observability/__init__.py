"""What the server tells its operators, each off unless run.yaml sets it: Prometheus metrics
(`metrics`), OpenTelemetry traces (`tracing`) and structured logs with the access log (`logs`)."""
