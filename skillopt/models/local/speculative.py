"""Speculative decoding in the server process (`LocalServer(draft=..., lookup=...)`): a smaller model
of the same tokenizer family drafts tokens the served model checks in one decode step, or drafts come
from n-grams already in the context (lookup decoding). Off by default: perf/local_model.py --limit
measures whether either pays on this machine (results in perf/results/local_model.json)."""

from __future__ import annotations


def configure(params, args) -> None:
    """Speculative decoding in the child, when asked: a draft model, or n-gram lookup."""
    import xllamacpp

    kinds = xllamacpp.common_speculative_type
    spec = params.speculative
    if args.draft:
        spec.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        spec.draft.mparams.path = args.draft
        if args.draft_max:
            spec.draft.n_max = args.draft_max
        if args.threads:
            spec.draft.cpuparams.n_threads = args.threads
            spec.draft.cpuparams_batch.n_threads = max(args.threads, args.batch_threads)
    elif args.lookup:
        spec.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
