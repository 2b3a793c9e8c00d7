"""The `fleetwatch` command and its subcommands."""
