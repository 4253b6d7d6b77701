"""The Responses API: create, retrieve, stream, chain, cancel and list model responses."""
