"""Admission (policy): may this image run this job? Its forgepatch labels must name the job's
arch and pin, the patchset the job's patch files hash to now (when the job names one) and every
package's identity (``combination.packages_problems``); otherwise the results would be filed
under another combination. An adapter reads the labels (the Docker engine's image, or the
registry's config for an image not pulled yet) and asks here before anything runs.
"""

from __future__ import annotations

from forgepatch.combination import LABEL, packages_problems
from forgepatch.errors import BadInput
from forgepatch.smoke.jobs import JobSpec


def admit(job: JobSpec, labels: dict[str, str], must_be_forgepatch: bool = False) -> None:
    """BadInput (one line) when ``labels`` are not the job's combination. An image without
    forgepatch's arch/pin labels (a hand-built one) is admitted unless ``must_be_forgepatch``
    (an image named by digest from a registry: it is only run as what its labels say)."""
    built = (labels.get(LABEL["arch"]), labels.get(LABEL["pin"]))
    if (all(built) or must_be_forgepatch) and built != (job.arch, job.pin):
        raise BadInput(f"image {job.image!r} was built for {built[0]}/{built[1]}, but job {job.id} is "
                       f"{job.arch}/{job.pin} (check --image, --builds or [smoke] image)")
    have = labels.get(LABEL["patchset"])
    if job.patchset is not None and have != job.patchset:
        raise BadInput(f"image {job.image!r} was built with patchset {have or '(none)'}, but the patch files "
                       f"of {job.arch} now hash to {job.patchset} (job {job.id}; rebuild and push it)")
    problems = packages_problems(labels, job.packages) if job.packages else []
    if problems:
        raise BadInput(f"image {job.image!r} is not the combination of job {job.id}: {problems[0]} "
                       f"(rebuild and push it)")
