"""identification package."""
