"""Online estimation on the bus: the loop every rig's online estimator shares."""
