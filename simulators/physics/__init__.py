"""simulators/physics package."""
