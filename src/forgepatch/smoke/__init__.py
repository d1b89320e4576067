"""Smoke testing: the graph-capture probe that runs inside images, and the runners that start it.

Keep this package import-light: ``forgepatch.smoke.probe`` runs inside images that hold only the
standard library and torch, so nothing here may import typer, rich, libcst, git or docker.
"""
