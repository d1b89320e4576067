"""forgepatch: carry architecture patches for SGLang forks as codemods, build and validate them."""

__version__ = "0.1.0"
