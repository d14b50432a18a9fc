"""An example of a lab's CI (docs/testing-your-rig.md): its press config and plan on the simulated press.

Copy this file and conftest.py next to your configs and point CONFIG at yours. The project's own suite runs
this file as it is (tests/test_testing_examples.py), against the shipped configs/press-sim.toml.
"""

from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "press-sim.toml"

# CI needs the plan's shape, not its length: three series of a five-setpoint staircase (the analysis needs
# three series), four readings per setpoint, a lower top force
SHORT_PLAN = {
    "plan": {"n_series": 3, "n_steps_up": 2, "n_samples": 4, "settle_time": 0.02, "q_max": 12000.0},
    "correction": {"tolerance": 60.0, "max_iterations": 6},
}


def test_my_press_plan_runs_to_its_end_and_leaves_the_press_safe(hil_sim):
    # speed 5, not 10: a run stops (safe) when the simulation falls behind its clock, and a CI machine
    # busy with other jobs fell 1.02 simulated s behind at speed 10 (its bound is 1 s)
    run = hil_sim(CONFIG, speed=5, overrides=SHORT_PLAN)
    session = run.session
    assert session.ok, session.describe()  # complete, and the safe state confirmed
    assert session.sim_speed == 5
    force, sensors = session.streams["press.force"], session.streams["press.sensors"]
    assert force.unit("force") == "N" and force.unit("pressure") == "Pa"
    assert sensors.units == ["m", "m", "m"]
    setpoints = 3 * (2 * 2 + 1)  # every series goes up and down its staircase
    assert session.summary["setpoints"] == setpoints
    assert sensors.samples == setpoints * 4  # n_samples readings per sensor and setpoint
    # the analysis of the recorded session, as `hil analyze` gives it: the friction model M3 is kept and
    # the linear model M1 rejected
    assert run.analysis is not None
    assert run.analysis["verdicts"]["M1"] == "reject"
    assert run.analysis["verdicts"]["M3"] == "keep"


def test_a_lost_force_source_heartbeat_ends_my_plan_safe(hil_sim):
    # the simulated source's watchdog (1 ms, real time) far shorter than any gap between the driver's writes
    # (a heartbeat after every force frame, every few ms even at speed 10): the source faults mid-plan
    fault = {"simulator": {"force_source": {"watchdog_timeout": 0.001}}}
    run = hil_sim(CONFIG, speed=10, overrides={**SHORT_PLAN, **fault})
    session = run.session
    assert session.status == "aborted" and "watchdog" in session.reason
    assert session.safe, session.describe()  # the plan stopped and the press was made safe
    assert session.plan_outcome is not None and session.plan_outcome["safe"] is True
    assert run.analysis is None  # nothing to analyse in an aborted run
