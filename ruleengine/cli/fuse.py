"""The compile-time command: fuse."""
