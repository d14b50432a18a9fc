"""Commissioning a rig without moving it: connect, identify and read every device of a config
(`hil devices`)."""
