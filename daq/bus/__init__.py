"""The bus: the wire format of frames and events, ZeroMQ publish/subscribe, CURVE keys."""
