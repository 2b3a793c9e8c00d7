"""The Spark applications (train, score) and their session setup."""
