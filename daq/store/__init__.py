"""The session store: one embedded SQLite file (WAL mode), no server to run.

* :mod:`~daq.store.schema`      tables, indexes, opening a connection, format migrations;
* :mod:`~daq.store.store_file`  one open file: connection, lock, writer identity, crash recovery;
* :mod:`~daq.store.writer`      :class:`SessionWriter`: create sessions, append in batches, finish;
* :mod:`~daq.store.reader`      :class:`SessionReader`: sessions, ranges, windows, chunks, events;
* :mod:`~daq.store.ranges`      sample ranges and time windows through the frame index;
* :mod:`~daq.store.payload`     a stored frame row: its time span, its samples decoded back;
* :mod:`~daq.store.records`     what reads return (SessionInfo, StreamInfo, StreamData, StreamTiming);
* :mod:`~daq.store.errors`      StoreError, UnknownSession;
* :mod:`~daq.store.read_write`  :class:`SessionStore`: a reader and a writer sharing one file.
"""
