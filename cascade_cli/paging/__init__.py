"""Paging: placing stored KV chunks into the live window (ingest and ask build on it)."""
