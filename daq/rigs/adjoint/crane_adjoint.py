"""The stacker crane's mast parameters (k23, d23, J3) by an adjoint-designed torque through the crane's
own OPC UA drive (issue 9): see :mod:`daq.rigs.adjoint.rig`."""

from daq.rigs.adjoint.rig import AdjointRig


class CraneAdjointRig(AdjointRig):
    kind = "crane-adjoint"
    summary = ("stacker crane: adjoint-designed (or multisine) torque through the OPC UA drive, motor speed "
               "measured; fit of k23, d23, J3 with friction and dead time as nuisance parameters")


RIG = CraneAdjointRig()
