"""Reading container images without running them, for `cgpu image check`."""
