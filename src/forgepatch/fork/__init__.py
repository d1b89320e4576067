"""The fork stage: pins (what upstream code a combination starts from), fork branches (one
commit per patch, with trailers), drift (patch health across many revisions), ``init``
(scaffolding a fork checkout), the git layer and the drift memo."""
