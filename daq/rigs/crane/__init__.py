"""The crane rig: a stacker-crane axis driven over OPC UA, multisine runs, model selection."""
