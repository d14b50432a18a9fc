"""Plots and files of results (matplotlib Agg, PNG): the I/O side of identification/."""
