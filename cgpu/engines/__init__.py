"""What cgpu knows of the container engines (podman, Docker, containerd, CRI-O): how each is found on a node,
which CDI rules it reads by, how it is configured, and the one door to podman and Docker (`client`)."""
