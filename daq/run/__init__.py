"""The run lifecycle: one run of any rig kind, its safe state, commands, recorder, replay."""
