"""servebook: an investigation book for LLM-serving performance.

The notebooks in ``notebooks/`` tell the story; this package does the work. Packages
mirror the chapters: ``probe`` (01), ``selection`` (02), ``backends`` (03), ``nccl`` (04),
``bench`` (05, with ``profile``), ``findings`` (06); ``engines``, ``hosts``, ``servers``, ``processes``,
``results`` and ``embedded`` are the ground they share (``lib/servebook/README.md`` draws the house).
"""

from .errors import EngineError, ModelError, ParameterError, ResultsError, ServebookError, ServerError

__version__ = "0.1.0"
__all__ = ["ServebookError", "ParameterError", "ResultsError", "EngineError", "ServerError", "ModelError", "__version__"]
