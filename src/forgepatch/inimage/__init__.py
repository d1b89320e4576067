"""Everything that runs INSIDE an image (or on a GPU host without forgepatch's dependencies):
the graph-capture probe, the SGLang server driver, the check harness, the log monitor and its
signature table, process handling and the toolchain report.

This package is copied whole into every image, beside ``forgepatch/__init__.py``,
``forgepatch/arch.py`` and ``forgepatch/errors.py`` (``IMAGE_FILES`` in
``forgepatch.images.context``). Standard library only (torch is imported inside the probe's
functions; SGLang is started as a process): it must never import typer, rich, libcst, git,
docker or pydantic, nor any other forgepatch module. The host side imports from here, never
the other way round.
"""
