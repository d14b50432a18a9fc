"""``hil serve``: the lab service in the browser.

One asyncio process (Starlette on uvicorn) that runs experiments itself through the one run lifecycle
(:func:`daq.run.lifecycle.run`, the same as ``hil run``), one at a time from a queue kept next to the
store; a JSON API over the store, the queue and the running run's command channel; a live relay of the
run's bus for browsers; bearer-token authentication; and a dashboard shipped in ``static/``.

* :mod:`~daq.serve.auth`       the token file, who a request is, the bind rule (TLS beyond loopback);
* :mod:`~daq.serve.run_queue`  the persistent queue (a JSON file written atomically next to the store);
* :mod:`~daq.serve.runner`     takes queued runs one at a time through the lifecycle, talks to the run;
* :mod:`~daq.serve.relay`      the current run's tap -> JSON messages with a sequence number per browser;
* :mod:`~daq.serve.configs`    the configs a server may run, each checked as ``hil check`` does;
* :mod:`~daq.serve.api`        the Starlette application (routes of docs/api.md);
* :mod:`~daq.serve.server`     binding, TLS, signals: ``serve()``.
"""
