"""Chat sessions: transcripts and KV chunks in the store, the window paged turn by turn."""
