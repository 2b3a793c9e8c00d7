"""File mode (``fleetwatch detect``): a recorded file scored online and causally, reading by
reading, with the detectors the streaming path runs."""
