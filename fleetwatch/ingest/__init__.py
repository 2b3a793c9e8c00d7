"""The MQTT⇄Kafka gateway: telemetry in, commands out, acks back."""
