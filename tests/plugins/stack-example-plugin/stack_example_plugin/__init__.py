"""An example third-party provider package for stack."""
