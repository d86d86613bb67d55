"""What a node holds, read safely under `--root`: the host's files, private files and caches, package databases.

Knows nothing of CDI or engines; the backends and `cgpu.engines` read the node through it."""
