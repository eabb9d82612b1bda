"""``Logger.warning_once``, as transformers defines it (``transformers.utils.logging``): a warning emitted once per
message, which Dynamo cannot trace (gb_type 'logging.Logger method not supported for non-export cases')."""
import functools
import logging


@functools.lru_cache(None)
def warning_once(self, *args, **kwargs):
    self.warning(*args, **kwargs)


logging.Logger.warning_once = warning_once


def get_logger(name):
    return logging.getLogger(name)
