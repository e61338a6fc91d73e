"""A workload file without a decorated function (the tuner must say so in one line)."""


def build(config):
    return None
