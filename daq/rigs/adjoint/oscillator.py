"""The two-mass oscillator rig kind (seed paper 002, sec. 4.1): see :mod:`daq.rigs.adjoint.rig`."""

from daq.rigs.adjoint.rig import make_rig

RIG = make_rig("oscillator", "two-mass oscillator: adjoint-designed force through an OPC UA drive, x2 "
                             "measured; least-squares fit of c2")
