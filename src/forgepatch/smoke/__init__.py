"""Smoke testing: the graph-capture probe that runs inside images, the runners that start it
and the matrix that runs images per arch x pin x flag profile, triages failures and bisects flags.

Keep this package import-light: ``forgepatch.smoke.probe`` runs inside images that hold only the
standard library and torch, so nothing here may import typer, rich, libcst, git or docker.
"""
