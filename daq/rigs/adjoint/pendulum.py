"""The cart pendulum rig kind (seed paper 002, sec. 4.2): see :mod:`daq.rigs.adjoint.rig`."""

from daq.rigs.adjoint.rig import AdjointRig


class PendulumRig(AdjointRig):
    kind = "pendulum"
    summary = ("cart pendulum: adjoint-designed force through an OPC UA drive, angle measured; least-squares "
               "fit of s_p and d_p")


RIG = PendulumRig()
