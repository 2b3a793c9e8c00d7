"""fleetwatch: streaming anomaly detection for IoT device fleets."""

__version__ = "0.1.0"
