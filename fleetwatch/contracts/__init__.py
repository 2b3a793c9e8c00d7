"""The vocabulary every stage shares: envelopes, topic names and configs, settings."""
