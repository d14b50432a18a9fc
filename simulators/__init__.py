"""simulators package."""
