"""The lab: sessions replicated from rig PCs to a Tiled catalogue, and read back from any machine.

``settings`` (the ``[lab]`` table, keys, errors), ``server`` (``hil lab serve``: Tiled's own server),
``layout`` (what a session looks like in Tiled), ``push`` (store-and-forward replication, verified),
``marks`` (the local store's record of what is replicated), ``reader`` (a lab session read through the
same interface as a local store), ``search`` (the ``hil sessions`` filters as Tiled queries).
Everything network-facing is Tiled's own server and client; nothing here speaks HTTP itself.
"""
