"""The two-mass oscillator rig kind (seed paper 002, sec. 4.1): see :mod:`daq.rigs.adjoint.rig`."""

from daq.rigs.adjoint.rig import AdjointRig


class OscillatorRig(AdjointRig):
    kind = "oscillator"
    summary = ("two-mass oscillator: adjoint-designed force through an OPC UA drive, x2 measured; "
               "least-squares fit of c2")


RIG = OscillatorRig()
