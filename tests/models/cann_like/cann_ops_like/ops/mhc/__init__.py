from .mhc_pre_sinkhorn import mhc_pre_sinkhorn  # noqa: F401  (the function shadows its module, as in CANN)
