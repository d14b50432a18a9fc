"""daq package."""
