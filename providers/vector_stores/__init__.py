"""Providers of the Vector stores API."""
