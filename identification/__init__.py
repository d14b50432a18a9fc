"""The math of identification: plain functions over numpy arrays returning result objects, no I/O.

Rooms, from the floor up (a room imports only rooms below it; `frequency` stands beside the others):
`estimation` (least squares, covariance, intervals) < `models` (press, drive kit, ODE plants, machine tool)
< `design` (sensors, multisines, adjoint), `selection` (model selection, uncertainty test), `gsa`
< `analyses` (what one rig's analysis runs).
"""
