"""The trainer: each device's detector parameters learned online from telemetry and published,
versioned, to the compacted parameter topic."""
