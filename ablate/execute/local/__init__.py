"""The local executor: a pool of long-lived worker processes on this machine."""
