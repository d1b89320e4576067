"""Benchmark: cold image build vs rebuild after a one-patch change vs cache hit, same run;
then the first push vs a cache-hit push (`build --push` of an unchanged image), side by side.

    PYTHONPATH=src python bench/build.py [--rounds N] [--base-image IMG] [--arch sm120] [--json]
                                         [--registry HOST:PORT | --no-push]

Each round, on the real SGLang 0.5.23 release tree and the local base image:
  cold     fresh context dir, empty upstream-tar cache, no layer cache (--force)
  rebuild  one package file changed (what one patch changing does to the patched tree)
  hit      nothing changed: content hash found, no build
Times are end to end (context assembly + engine), patch engine excluded. Goals: rebuild <=
15% of cold, cache hit <= 1 s. Exit 1 when a goal is missed. Images are removed at the end.

Push (a private registry started with tests/support/registry.sh in the temp dir unless
--registry names one; stopped by pid at the end), on the CLI's path with the shipped series:
  push       the first push of the image to a fresh repository (every layer uploaded)
  push hit   `build --push` again, nothing changed: patch engine + context + cache lookup +
             remote check (manifest + config), no upload; in process (after start-up) and as
             the whole CLI process (start-up included)
Goal: push hit <= 1 s after start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from forgepatch.arch import get_arch  # noqa: E402
from forgepatch.images.build import build_image, connect  # noqa: E402
from forgepatch.images.prepare import build_context  # noqa: E402
from forgepatch.combination import Upstream  # noqa: E402
from forgepatch.images.spec import ImageSpec, SourceFacts  # noqa: E402
from images_support import linked_copy, release_tree, rewrite  # noqa: E402
from forgepatch.patching.library import as_library  # noqa: E402

CHANGED = "srt/layers/flashinfer_comm_fusion.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arch", default="sm120")
    ap.add_argument("--base-image", default=os.environ.get("FORGEPATCH_TEST_BASE_IMAGE", "forgepatch-test/base:bookworm"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--registry", help="push to this registry (HOST:PORT) instead of a private one")
    ap.add_argument("--no-push", action="store_true", help="skip the push timings")
    args = ap.parse_args()

    api = connect()
    pristine = release_tree()
    pin = f"b{uuid.uuid4().hex[:8]}"
    repo = f"forgepatch-bench/sglang-{pin}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="forgepatch-bench-") as tmp:
        tmp = Path(tmp)
        os.environ["FORGEPATCH_CACHE_DIR"] = str(tmp / "cache")  # cold = empty upstream-tar cache
        patched = linked_copy(pristine, tmp / "patched" / "sglang")
        original = (pristine / CHANGED).read_text()
        try:
            for round_no in range(args.rounds):
                ctx_dir = tmp / f"ctx-{round_no}"
                for cache in (tmp / "cache").glob("upstream-tars/*"):
                    cache.unlink()

                def timed(edit: str | None, force: bool = False):
                    if edit is not None:
                        rewrite(patched / CHANGED, original + edit)
                    t0 = time.perf_counter()
                    ctx = build_context(ctx_dir, patched, pristine)
                    spec = ImageSpec(get_arch(args.arch), pin, repo, args.base_image, ctx,
                                     SourceFacts(Upstream("pypi", "0.5.23")), patchset=f"round{round_no}")
                    result = build_image(spec, api=api, force=force)
                    return time.perf_counter() - t0, result

                cold, r0 = timed(f"\n# bench round {round_no} v1\n", force=True)
                rebuild, r1 = timed(f"\n# bench round {round_no} v2\n")
                hit, r2 = timed(None)
                assert not r0.cache_hit and not r1.cache_hit and r2.cache_hit
                rows.append({"cold_s": cold, "rebuild_s": rebuild, "hit_s": hit,
                             "rebuilt_layers": r1.rebuilt_steps})
            engine = engine_cache_hit(api, args, tmp)
            push = None if args.no_push else push_timings(api, args, tmp)
        finally:
            for image in api.images(name=repo):
                api.remove_image(image["Id"], force=True)

    cold = statistics.median(r["cold_s"] for r in rows)
    rebuild = statistics.median(r["rebuild_s"] for r in rows)
    hit = statistics.median(r["hit_s"] for r in rows)
    summary = {
        "arch": args.arch, "base_image": args.base_image, "rounds": rows,
        "median": {"cold_s": round(cold, 3), "rebuild_s": round(rebuild, 3), "hit_s": round(hit, 3)},
        "rebuild_over_cold": round(rebuild / cold, 3),
        "goals": {"rebuild_le_15pct_of_cold": rebuild <= 0.15 * cold, "hit_le_1s": hit <= 1.0},
        "cache_hit_with_patch_engine_s": engine,
        "push": push,
    }
    if push is not None:
        summary["goals"]["push_hit_le_1s"] = push["push_hit_s"] <= 1.0
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for i, r in enumerate(rows):
            print(f"round {i}: cold {r['cold_s']:.2f}s  rebuild {r['rebuild_s']:.2f}s  hit {r['hit_s']:.3f}s"
                  f"  (rebuilt: {', '.join(r['rebuilt_layers'])})")
        print(f"median: cold {cold:.2f}s  rebuild {rebuild:.2f}s ({100 * rebuild / cold:.1f}% of cold, goal <= 15%)"
              f"  cache hit {hit:.3f}s (goal <= 1 s)")
        if engine is not None:
            print(f"cache hit including the patch engine (shipped {args.arch} series, in process): {engine:.3f}s")
        if push is not None:
            print(f"push: first {push['first_push_s']:.2f}s ({push['image_mib']:.0f} MiB, every layer)  "
                  f"cache-hit build --push {push['push_hit_s']:.3f}s after start-up (goal <= 1 s; of it the remote "
                  f"check {push['remote_check_s']:.3f}s), {push['cli_push_hit_s']:.2f}s as a whole CLI process")
    return 0 if all(summary["goals"].values()) else 1


def base_of(api, ref: str):
    """The base image's facts, read as `forgepatch build` reads them (its Python, machine and
    glibc pick the wheel of the pin the image carries)."""
    from forgepatch.images.base_facts import read_base
    from forgepatch.images.build import base_image_id

    return read_base(api, ref, base_image_id(api, ref))


def engine_cache_hit(api, args, tmp: Path) -> float | None:
    """Median cache hit of the CLI's path (patch engine + context + lookup), in process."""
    try:
        from forgepatch.images.prepare import prepare, resolve_target
        from forgepatch.config import load_matrix
        from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES

        matrix = load_matrix(SHIPPED_MATRIX, as_library(SHIPPED_PATCHES))
    except Exception:  # noqa: BLE001 - no engine / shipped matrix in this tree
        return None
    matrix.smoke.image_repo = f"forgepatch-bench/engine-{uuid.uuid4().hex[:8]}"
    target = resolve_target(matrix, args.arch, base_image=args.base_image)
    times = []
    try:
        for _ in range(4):
            t0 = time.perf_counter()
            spec = prepare(target, matrix, SHIPPED_PATCHES, tmp / "engine-ctx", base=base_of(api, target.base_image)).spec
            result = build_image(spec, api=api)
            times.append(time.perf_counter() - t0)
        assert result.cache_hit
    finally:
        for image in api.images(name=matrix.smoke.image_repo):
            api.remove_image(image["Id"], force=True)
    return round(statistics.median(times[1:]), 3)


def push_timings(api, args, tmp: Path) -> dict:
    """First push and cache-hit `build --push`, side by side, on a real registry."""
    import subprocess

    from forgepatch.infra import registry
    from forgepatch.combination import LABEL
    from forgepatch.config import load_matrix
    from forgepatch.images.prepare import prepare, resolve_target
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES

    sys.path.insert(0, str(ROOT / "tests"))
    from support.local_registry import start_registry

    own = None if args.registry else start_registry(tmp / "registry")
    host = args.registry or own.host
    repo = f"{host}/forgepatch-bench/push-{uuid.uuid4().hex[:8]}"
    matrix = load_matrix(SHIPPED_MATRIX, as_library(SHIPPED_PATCHES))
    matrix.smoke.image_repo = repo
    target = resolve_target(matrix, args.arch, base_image=args.base_image)
    ctx = tmp / "push-ctx"
    try:
        base = base_of(api, target.base_image)  # as the CLI's build: the base's wheel, complete
        result = build_image(prepare(target, matrix, SHIPPED_PATCHES, ctx, base=base).spec, api=api)
        base_id = result.labels.get(LABEL["base_image_id"])
        size = api.inspect_image(result.image_id)["Size"]
        t0 = time.perf_counter()
        first = registry.push(api, result.image_id, result.tags[0], {LABEL["context_hash"]: result.content_hash, LABEL["base_image_id"]: base_id})
        first_s = time.perf_counter() - t0
        assert first.uploaded
        hits, checks = [], []
        for _ in range(4):
            t0 = time.perf_counter()
            again = build_image(prepare(target, matrix, SHIPPED_PATCHES, ctx, base=base).spec, api=api)
            t1 = time.perf_counter()
            pushed = registry.push(api, again.image_id, again.tags[0], {LABEL["context_hash"]: again.content_hash, LABEL["base_image_id"]: base_id})
            hits.append(time.perf_counter() - t0)
            checks.append(time.perf_counter() - t1)
            assert again.cache_hit and not pushed.uploaded and pushed.digest == first.digest
        config = tmp / "push-matrix.toml"
        config.write_text(SHIPPED_MATRIX.read_text().replace('image_repo = "forgepatch/sglang"', f'image_repo = "{repo}"'))
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        t0 = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "forgepatch", "--config", str(config), "build", "--arch", args.arch,
                              "--base-image", args.base_image, "--context-dir", str(ctx), "--push", "--json"],
                             capture_output=True, text=True, env=env, timeout=600)
        cli_s = time.perf_counter() - t0
        assert cli.returncode == 0, cli.stderr
        doc = json.loads(cli.stdout)
        assert doc["uploaded"] is False and doc["digest"] == first.digest, doc
    finally:
        for image in api.images(name=repo):
            api.remove_image(image["Id"], force=True)
        if own is not None:
            own.stop()
    return {"image_mib": round(size / 2**20, 1), "first_push_s": round(first_s, 3),
            "push_hit_s": round(statistics.median(hits[1:]), 3), "remote_check_s": round(statistics.median(checks[1:]), 3),
            "cli_push_hit_s": round(cli_s, 3), "cli_push_seconds": doc["push_seconds"]}


if __name__ == "__main__":
    sys.exit(main())
