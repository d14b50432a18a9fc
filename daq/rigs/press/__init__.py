"""The press rig: force staircases with online setpoint correction, sensor selection, model test."""
