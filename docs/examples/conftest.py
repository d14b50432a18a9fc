# A lab's conftest.py: one line gives every test the hil_sim fixture (docs/testing-your-rig.md).
pytest_plugins = ["daq.testing.plugin"]
