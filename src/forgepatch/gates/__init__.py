"""The arch gates of an SGLang tree: scan (fast partial parsing), index (definitions),
values/bindings/evaluate (what a condition is on each registry arch), reads (which
expressions read the arch), walk (the gates of a file), inventory, diff (two pins),
features (drift --gates), render, service (memoised inventories of sources)."""
