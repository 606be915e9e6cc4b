#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check an SGLang command line with SGLang's own code (run with a parse venv's python).

    VENV/bin/python validate_argv.py [--resolve] [--sm120] [--key DEST]... -- ARGV...

Exit 2: SGLang's parser refused the argv (its message on stderr).
Exit 3: ServerArgs.resolve_once() refused it (JSON with the error on stdout).
Exit 0: accepted; prints JSON of the speculative/attention/tp values.
--resolve runs resolve_once() (0.5.2x) -- needs --device cuda and local config.json dirs;
--sm120 wraps it in runtime_context.override_platform(...) as an RTX PRO 6000 (SM120).
"""
import dataclasses
import json
import sys

KEYS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_draft_tokens",
        "speculative_num_steps", "speculative_eagle_topk", "attention_backend",
        "speculative_draft_attention_backend", "page_size", "disable_overlap_schedule", "tp_size",
        "tool_call_parser", "reasoning_parser", "served_model_name", "mamba_scheduler_strategy",
        "mamba_radix_cache_strategy", "cuda_graph_max_bs", "context_length")
SM120 = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
             is_blackwell=True, is_sm120=True, is_sm100=False, is_sm100_or_sm110=False, is_sm110=False,
             is_sm90=False, has_flashinfer=True, device_sm=120, device_capability=(12, 0))


def main():
    opts, argv = sys.argv[1:], []
    if "--" in opts:
        cut = opts.index("--")
        opts, argv = opts[:cut], opts[cut + 1:]
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)  # SystemExit(2) on a bad argv
    if "--resolve" in opts:
        try:
            if "--sm120" in opts:
                from sglang.srt.runtime_context import override_platform
                with override_platform(**SM120):
                    args.resolve_once()
            else:
                args.resolve_once()
        except Exception as exc:
            print(json.dumps({"resolve_error": "%s: %s" % (type(exc).__name__, exc)}))
            return 3
    if hasattr(args, "resolved_dict"):
        values = args.resolved_dict()
    else:
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}
    keys = list(KEYS) + [opts[i + 1] for i, o in enumerate(opts[:-1]) if o == "--key"]
    print("CT200-RESULT " + json.dumps({k: values.get(k) for k in keys if k in values}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
