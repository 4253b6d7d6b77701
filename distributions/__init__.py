"""Ready-made run.yaml files, one folder per distribution (`stack run starter`)."""
