"""The CDI file format as the reference Go library reads it: specs, names, discovery.

This package knows nothing of GPU APIs or of the host (cgpu.backends.cdi does).
"""
