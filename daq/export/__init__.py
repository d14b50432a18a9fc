"""Streaming export of stored sessions: HDF5, MAT v5/v7.3 and CSV, with units and metadata."""
