"""The session store: SQLite sessions, streams, frames and events; writer and reader."""
