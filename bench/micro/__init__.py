"""One component measured alone (in this process, or as its one process against the brokers),
each against a baseline in the same run."""
