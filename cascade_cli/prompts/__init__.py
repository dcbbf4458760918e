"""Content-addressed prompt reuse for API clients: conversations resent whole on every request
find the longest prefix whose KV the tiers hold, and decode only the rest."""
