"""Detection quality: labelled anomalies through the detectors, scored like ``fleetwatch sim
eval``."""
