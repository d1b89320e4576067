"""Custom codemod patch (the escape hatch for edits that are not arch gates).

On sm_103 (B300/GB300), expert parallelism with CUDA graphs died in graph capture with
``CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmStridedBatchedEx`` (with or without
NVLS and all-reduce fusion), while TP8 with graphs worked. This patch makes SGLang refuse
``--ep-size > 1`` with CUDA graphs at argument-check time, with a message saying what to do,
instead of dying minutes later in capture. It finds ``check_server_args`` (a ServerArgs
method up to 0.5.19, ``arg_groups/validation_hook.py`` from 0.5.20) by symbol, in the
language server's modules only (``srt/``: from 0.5.5 the diffusion server in
``multimodal_gen/`` has a ``check_server_args`` of its own, which this guard is not for),
naming ``tp_size`` in code; picks the one that does the checking (not the delegating
wrapper), and inserts a call to a module-level guard at the top of its body.
"""

from __future__ import annotations

from forgepatch.patching import api

GUARD = "_forgepatch_sm103_ep_graph_guard"

PATCH = {
    "id": "sm103-ep-cuda-graph-guard",
    "summary": "Refuse EP>1 with CUDA graphs on sm_103 at argument-check time",
    "arches": ["sm103"],
    "sites": [
        {
            "name": "argument-check",
            "functions": ["check_server_args"],
            # binding: the site is in these modules, never in multimodal_gen/
            "modules": ["srt/server_args.py", "srt/arg_groups/*.py"],
            "markers": ["tp_size"],
        }
    ],
    "examples": [
        {
            "name": "guard inserted at the top of the checking function",
            "path": "srt/server_args.py",
            "arch": "sm103",
            "before": (
                "import logging\n\n\n"
                "class ServerArgs:\n"
                "    def check_server_args(self):\n"
                "        # Check parallel size constraints\n"
                "        assert self.tp_size % self.nnodes == 0, \"tp_size must be divisible by number of nodes\"\n"
            ),
            "after": (
                "import logging\n\n\n"
                "def _forgepatch_sm103_ep_graph_guard(args) -> None:\n"
                "    \"\"\"forgepatch sm103-ep-cuda-graph-guard: EP>1 with CUDA graphs dies in graph capture on\n"
                "    sm_103 (CUBLAS_STATUS_EXECUTION_FAILED in cublasGemmStridedBatchedEx); refuse it early.\"\"\"\n"
                "    if getattr(args, \"ep_size\", 1) <= 1 or getattr(args, \"disable_cuda_graph\", False):\n"
                "        return\n"
                "    try:\n"
                "        import torch\n\n"
                "        on_arch = torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 3)\n"
                "    except Exception:  # no usable CUDA: nothing to guard\n"
                "        return\n"
                "    if on_arch:\n"
                "        raise ValueError(\n"
                "            \"--ep-size > 1 with CUDA graphs fails in graph capture on sm_103 (B300/GB300); \"\n"
                "            \"add --disable-cuda-graph or use tensor parallelism only (forgepatch sm103-ep-cuda-graph-guard)\"\n"
                "        )\n\n\n"
                "class ServerArgs:\n"
                "    def check_server_args(self):\n"
                "        _forgepatch_sm103_ep_graph_guard(self)\n"
                "        # Check parallel size constraints\n"
                "        assert self.tp_size % self.nnodes == 0, \"tp_size must be divisible by number of nodes\"\n"
            ),
        },
        {
            "name": "a wrapper that only delegates is left alone",
            "path": "srt/server_args.py",
            "arch": "sm103",
            "before": (
                "class ServerArgs:\n"
                "    def check_server_args(self):\n"
                "        from sglang.srt.arg_groups.validation_hook import check_server_args\n\n"
                "        check_server_args(self)  # validates tp_size and friends\n"
            ),
        },
    ],
}


def _guard_source(cc: tuple[int, int]) -> str:
    return (
        f"def {GUARD}(args) -> None:\n"
        '    """forgepatch sm103-ep-cuda-graph-guard: EP>1 with CUDA graphs dies in graph capture on\n'
        '    sm_103 (CUBLAS_STATUS_EXECUTION_FAILED in cublasGemmStridedBatchedEx); refuse it early."""\n'
        '    if getattr(args, "ep_size", 1) <= 1 or getattr(args, "disable_cuda_graph", False):\n'
        "        return\n"
        "    try:\n"
        "        import torch\n\n"
        f"        on_arch = torch.cuda.is_available() and torch.cuda.get_device_capability() == {tuple(cc)}\n"
        "    except Exception:  # no usable CUDA: nothing to guard\n"
        "        return\n"
        "    if on_arch:\n"
        "        raise ValueError(\n"
        '            "--ep-size > 1 with CUDA graphs fails in graph capture on sm_103 (B300/GB300); "\n'
        '            "add --disable-cuda-graph or use tensor parallelism only (forgepatch sm103-ep-cuda-graph-guard)"\n'
        "        )\n"
    )


def _checks_args(func, ctx) -> bool:
    """The function that does the checking asserts or raises; a delegating wrapper doesn't."""
    code = ctx.code(func.body)
    return "assert " in code or "raise " in code


class Codemod(api.SiteCodemod):
    def edit_function(self, func, site, symbol, ctx):
        if not _checks_args(func, ctx):
            return None
        if any(f"{GUARD}(" in ctx.code(stmt) for stmt in func.body.body[:3]):
            api.already(ctx, site, symbol, func, "guard already present")
            return None
        params = func.params.params
        receiver = params[0].name.value if params else "self"
        ctx.state["needs_guard"] = True
        api.edited(ctx, site, symbol, func, f"inserted {GUARD}({receiver})")
        # the first statement's leading comment stays after the guard
        return api.insert_first(func, f"{GUARD}({receiver})")

    def finalize_module(self, module, ctx):
        if not ctx.state.get("needs_guard"):
            return module
        return api.define_once(module, ctx, GUARD, _guard_source(ctx.arch.cc))
