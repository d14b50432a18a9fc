"""Rig configs: TOML read once, checked whole into typed structs; the tables every rig shares."""
