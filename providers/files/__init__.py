"""Providers of the Files API."""
