"""The scorer: telemetry scored per device in event time against its latest parameters, into
alert episodes, device state, sessions and late readings."""
