"""tracecheck: Dynamo traceability diagnostics for PyTorch models and custom operators."""
from .model.probe import Case, probe

__version__ = "0.1.0"
__all__ = ["Case", "probe", "__version__"]
