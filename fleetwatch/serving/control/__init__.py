"""Device control: commands issued through the API, published to ``device.commands``,
followed to their acknowledgement or timeout."""
