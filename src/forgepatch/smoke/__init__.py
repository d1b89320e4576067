"""Smoke testing, host side: the matrix of arch x pin x flag profile jobs, the runners that
start them (docker: one container per job; local: process sessions here), flag bisection,
reports and ``results merge``. What runs inside the images is ``forgepatch.inimage``.
"""
