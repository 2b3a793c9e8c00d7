"""The HTTP API and its Kafka materialiser."""
