"""Smoke matrix: run images per arch x pin x flag profile, triage failures, bisect flags."""
