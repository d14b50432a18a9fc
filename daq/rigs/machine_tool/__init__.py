"""The machine-tool rig: modal tests over SCPI, modal extraction, GSA identification, UFF."""
