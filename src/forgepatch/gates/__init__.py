"""The arch gates of an SGLang tree: scan (fast partial parsing), index (definitions),
evaluate (what a condition is on each registry arch), inventory (the gates), diff (two pins)."""
