"""What the API accepts and returns, per resource (Create / Update / Public)."""
