"""The crane's excitation is designed once per process for each setting (daq/rigs/excitation.py): the next
run of the same config gets the same trajectory, as its own arrays."""

from __future__ import annotations

import msgspec
import numpy as np

from daq.rigs.excitation import ExcitationTable, design_excitation
from identification.design.multisine import design_multisine

TABLE = msgspec.convert({"f_min": 1.0, "f_max": 150.0, "n_lines": 40, "duration": 0.5, "max_iter": 20,
                         "training": {"grid": "log", "seed": 11},
                         "validation": {"grid": "lin", "seed": 22, "f_min": 1.5, "n_lines": 30}},
                        ExcitationTable)


def test_a_second_design_of_the_same_setting_is_the_same_trajectory_in_arrays_of_its_own():
    dt, torque, info, ms, peak = design_excitation(TABLE, "training", 8.0)
    direct = design_multisine(1.0, 150.0, 40, 1e-4, n_periods=1, grid="log", seed=11, max_iter=20,
                              period=0.5)
    np.testing.assert_array_equal(ms.signal, direct.signal)  # what the design itself gives
    assert peak == 4.0 and np.abs(torque).max() == info["peak_torque"] == 4.0
    saved = torque.copy()
    torque[:] = 0.0  # a caller changes its arrays
    ms.signal[:] = 0.0
    again = design_excitation(TABLE, "training", 8.0)
    np.testing.assert_array_equal(again[1], saved)
    np.testing.assert_array_equal(again[3].signal, direct.signal)
    assert again[1] is not torque and again[3].signal is not ms.signal


def test_each_role_and_setting_has_its_own_design():
    training = design_excitation(TABLE, "training", 8.0)[3]
    validation = design_excitation(TABLE, "validation", 8.0)[3]
    assert validation.bins.size == 30 and training.bins.size == 40
    other_seed = msgspec.structs.replace(TABLE, training=msgspec.structs.replace(TABLE.training, seed=12))
    reseeded = design_excitation(other_seed, "training", 8.0)[3]
    np.testing.assert_array_equal(reseeded.bins, training.bins)
    # the seed draws the random-phase reference: another seed, another design, not the first one's copy
    assert reseeded.crest_factor_random != training.crest_factor_random
