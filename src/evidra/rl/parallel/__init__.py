"""Where training runs: processes, precision and sharding."""
