"""The `local` target: Docker Compose on this host."""
