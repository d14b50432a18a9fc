"""The service's branches of the one error tree. The root and the device branch are in
:mod:`drivers.errors` (the lowest layer: drivers import nothing of ``daq``)::

    HilError                    drivers.errors
    ├── DeviceError             drivers.errors: a device failed, refused, faulted or timed out
    ├── ConfigError             a config file or value is wrong; CURVE keys missing or unsafe (daq.bus.keys)
    ├── ProtocolError           a bus message, command or JSON text is malformed, or a command is unanswered
    │                           (daq.bus, daq.run, daq.json_codec)
    ├── StoreError              the session store, or a request to it, or an export (daq.store, daq.export)
    ├── PlanError               an experiment plan ends early (daq.run.safety.PlanAborted)
    ├── ConflictError           a request that the service's state refuses now: no such run running, a
    │                           replay that cannot start (daq.serve: HTTP 409)
    └── AccessError             a request or command without valid credentials (daq.serve.auth: HTTP 401)

These are branches to catch (``except daq.errors.StoreError`` catches every store and export error);
modules raise their concrete subclasses (``daq.config.load.ConfigError`` carries the file and key, and
``daq.store.errors.StoreError`` is the store's own). Concrete errors keep a builtin base too where callers
catch one (``ValueError``, ``TimeoutError``, ``KeyError``, ``OSError``). The CLI maps the branches to exit
codes and one-line messages in one place (:func:`daq.cli.common.exit_code`).
"""

from __future__ import annotations

from drivers.errors import DeviceError, HilError

__all__ = ["AccessError", "ConfigError", "ConflictError", "DeviceError", "HilError", "PlanError",
           "ProtocolError", "StoreError", "one_line"]


class ConfigError(HilError):
    """Branch: a config file or value is wrong."""


class ProtocolError(HilError):
    """Branch: a bus message or command that cannot be encoded, decoded or answered in time."""


class StoreError(HilError):
    """Branch: a problem with the session store or a request to it, or with an export of a session."""


class PlanError(HilError):
    """Branch: an experiment plan could not run to its end."""


class ConflictError(HilError):
    """Branch: a request the service cannot carry out in its present state (nothing is changed)."""


class AccessError(HilError):
    """Branch: a request or command without valid credentials (nothing is changed)."""


def one_line(exc: BaseException) -> str:
    """``exc`` as one line of text (the message's whitespace collapsed): what the CLI prints after
    ``Error:`` and what the API answers."""
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
