"""Per-arch images: deterministic build context (context.py), what an image is (spec.py),
engine builds (build.py), matrix -> patched context (prepare.py), docker-bake.json (bake.py)."""
