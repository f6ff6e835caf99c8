"""`zerolayer collapse ...`: calibrate, map, ablate, build, drift. Flags left unset take the
model's collapse settings (models.yaml `collapse:`), so the CLI holds no defaults of its own."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zerolayer.config import CollapseConfig, PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = ["add_parser", "artifacts_dir", "build_settings", "layer_sensitivity"]


def artifacts_dir(cfg: PlatformConfig, model: str) -> Path:
    """Where a model's collapse artifacts live: <artifacts_dir>/<model>."""
    return cfg.artifact_root(model)


def _corpora(args: argparse.Namespace, cfg: PlatformConfig) -> Any:
    """The standard domains (--domains, default the model's collapse.domains) plus the user's
    files as one more domain (--corpus: calibration text; --eval-corpus: held-out text) and,
    with --from-traffic, the prompts kept from opted-in keys as the traffic domain."""
    from zerolayer.collapse.domains import standard_corpora, user_domain
    from zerolayer.models.importer import ensure_model

    domains: Sequence[str] = cfg.models[args.model or cfg.default_model].collapse.domains
    if getattr(args, "domains", None) is not None:
        domains = tuple(d for d in args.domains.split(",") if d)
    extra = [user_domain(getattr(args, "corpus", None), getattr(args, "eval_corpus", None))]
    model_dir = ensure_model(cfg, args.model)
    cache = Path(cfg.cache_dir) / "corpora"
    if getattr(args, "from_traffic", False):
        from zerolayer.collapse.traffic import load_traffic, traffic_domain

        try:
            extra.append(
                traffic_domain(
                    load_traffic(cfg, args.model), model_dir, cache, args.traffic_prompts
                )
            )
        except ValueError as exc:
            raise SystemExit(f"collapse: {exc}") from exc
    return standard_corpora(model_dir, cache, domains, [e for e in extra if e])


def _corpus(args: argparse.Namespace, split: str, cfg: PlatformConfig) -> Any:
    """One part of the corpora; the user's files alone when they are given for that part
    (calibrate and drift measure the text they are given)."""
    from zerolayer.collapse.corpus import files_corpus

    files = args.corpus if split == "calibration" else args.eval_corpus
    if files:
        return files_corpus([Path(f) for f in files], name=f"user-{split}")
    return getattr(_corpora(args, cfg), split)


def _load(cfg: PlatformConfig, model: str) -> tuple[Any, Any, Path]:
    from transformers import AutoTokenizer

    from zerolayer.collapse.model import load_model
    from zerolayer.models.importer import ensure_model

    model_dir = ensure_model(cfg, model)
    return load_model(model_dir), AutoTokenizer.from_pretrained(str(model_dir)), model_dir


def _cmd_calibrate(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.calibrate import calibrate
    from zerolayer.collapse.corpus import token_windows

    s = _settings(args, cfg)
    model, tok, _ = _load(cfg, args.model)
    corpus = _corpus(args, "calibration", cfg)
    windows = token_windows(tok, corpus, s.samples, s.seq_len, seed=s.seed)
    if len(windows) < s.samples:
        print(f"note: the corpus holds only {len(windows)} windows of {s.seq_len} tokens")
    meta = {"model": args.model, "corpus": corpus.describe(), "seed": s.seed}
    smap = calibrate(model, windows, quantile=s.quantile, meta=meta)
    out = smap.save(Path(args.out or artifacts_dir(cfg, args.model) / "silence_map"))
    print(f"silence map: {out}")
    return 0


def _cmd_map(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.draw import draw_html, draw_png
    from zerolayer.collapse.silence_map import SilenceMap

    args.model = args.model or cfg.default_model
    folder = Path(args.map or artifacts_dir(cfg, args.model) / "silence_map")
    smap = SilenceMap.load(folder)
    out = Path(args.out or folder)
    png = draw_png(smap, out / "silence_map.png", args.quantile)
    html = draw_html(smap, out / "silence_map.html", args.quantile)
    print(f"{png}\n{html}")
    return 0


def layer_sensitivity(
    evaluator: Any, model: Any, scores: Any, protect: Any, level: float
) -> list[dict[str, Any]]:
    """Cut `level` of one layer's MLP channels at a time (plain masking): KL and perplexity
    change of each."""
    from zerolayer.collapse.ablate import channel_mask
    from zerolayer.collapse.allocate import layer_sensitivity as measure
    from zerolayer.collapse.select import keep_masks

    sens = measure(
        evaluator,
        lambda i, lv: channel_mask(model, keep_masks(scores, {i: lv}, protect)),
        range(scores.shape[0]),
        (level,),
        desc="per-layer sensitivity",
    )
    return [
        {"layer": i, "level": level, "ppl_delta": sens.ppl_delta[i][0], "kl": sens.kl[i][0]}
        for i in sens.layers
    ]


def _cmd_ablate(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.ablate import DomainEvaluator, activation_threshold, channel_mask
    from zerolayer.collapse.corpus import domain_windows
    from zerolayer.collapse.select import channel_scores, dynamic_thresholds, keep_masks, protected
    from zerolayer.collapse.silence_map import SilenceMap

    s = _settings(args, cfg)
    folder = Path(args.map or artifacts_dir(cfg, args.model) / "silence_map")
    smap = SilenceMap.load(folder)
    model, tok, _ = _load(cfg, args.model)
    windows = domain_windows(
        tok, _corpus(args, "evaluation", cfg), s.eval_samples, s.seq_len, seed=s.seed
    )
    evaluator = DomainEvaluator(model, windows, progress=True)
    layers = range(smap.layers)
    report: dict[str, Any] = {
        "map": str(folder),
        "method": args.method,
        "level": args.level,
        "eval_windows": {d: len(w) for d, w in windows.items()},
    }
    if args.method == "dynamic":
        cut = activation_threshold(model, dynamic_thresholds(smap, {i: args.level for i in layers}))
    else:
        scores = channel_scores(smap, model)
        protect = protected(smap)
        masks = keep_masks(scores, {i: args.level for i in layers}, protect)
        comp = {i: smap.stats["mlp"].mean[i] for i in layers} if args.compensate else None
        cut = channel_mask(model, masks, compensate=comp)
        if args.sensitivity:
            report["sensitivity"] = layer_sensitivity(evaluator, model, scores, protect, args.level)
    report["result"] = evaluator.evaluate(cut).as_dict()
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def build_settings(cfg: PlatformConfig, model: str, **overrides: Any) -> CollapseConfig:
    """The model's collapse settings with CLI overrides (None: not given), validated."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return CollapseConfig.model_validate({**cfg.models[model].collapse.model_dump(), **given})


def _settings(args: argparse.Namespace, cfg: PlatformConfig) -> CollapseConfig:
    """build_settings from the flags this subcommand has, and the model it names."""
    if args.model is None:
        args.model = cfg.default_model
    names = "samples eval_samples seq_len seed quantile flip_prompts flip_tokens".split()
    return build_settings(cfg, args.model, **{n: getattr(args, n, None) for n in names})


def _cmd_build(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.missing import clear_cards
    from zerolayer.collapse.strategies import TIERS, build
    from zerolayer.models.importer import ensure_model

    tiers = [t for t in args.tiers.split(",") if t]
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise SystemExit(f"unknown tiers {sorted(unknown)}; known: {', '.join(TIERS)}")
    settings = _settings(args, cfg)
    out = Path(args.out or artifacts_dir(cfg, args.model))
    if args.from_traffic and not args.out:  # a candidate, never the served artifacts
        out = artifacts_dir(cfg, args.model) / "candidates" / time.strftime("%Y%m%d-%H%M%S")
    builder = Builder(ensure_model(cfg, args.model), out, _corpora(args, cfg), settings, args.model)
    clear_cards(out, tiers)  # what is there now is not a finished build of these kinds
    cards = build(builder, tiers)
    for tier, card in cards.items():
        print(
            f"{tier:9s} ppl {card['quality']['ppl_delta']:+.2%}  kl {card['quality']['kl']:.4f}  "
            f"flips {card['flips']['flips']:.1%} ({card['flips']['worst_domain']})  {out / tier}"
        )
    if settings.price_after_build and args.price and out == artifacts_dir(cfg, args.model):
        _price_built(cfg, args.model, set(cards))
    return 0


def _price_built(cfg: PlatformConfig, model: str, kinds: set[str]) -> None:
    """Measure the cost of the served tiers these built kinds make, and of the dense tiers that
    were never measured."""
    from zerolayer.collapse.price import price_tiers, tiers_to_price

    tiers = tiers_to_price(cfg, model, kinds)
    s = cfg.models[model].collapse
    if tiers:
        price_tiers(
            cfg,
            model,
            tiers,
            s.price_streams,
            s.price_tokens,
            measured_by="zerolayer collapse build",
        )


def _cmd_verify(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.corpus import domain_windows
    from zerolayer.collapse.verify import BUDGET_OF, verify

    if args.tier not in BUDGET_OF:
        raise SystemExit(f"unknown tier kind {args.tier!r}; known: {', '.join(BUDGET_OF)}")
    s = _settings(args, cfg)
    folder = Path(args.artifact or artifacts_dir(cfg, args.model) / args.tier)
    model, tok, model_dir = _load(cfg, args.model)
    # the builder's evaluation windows (seed + 1)
    windows = domain_windows(
        tok, _corpora(args, cfg).evaluation, s.eval_samples, s.seq_len, s.seed + 1
    )
    report = verify(model, model_dir, folder, windows, s.budget(BUDGET_OF[args.tier]), args.tier)
    q = report["quality"]
    for domain, e in q["domains"].items():
        print(
            f"{domain:12s} ppl {e['dense_ppl']:9.3f} -> {e['ppl']:9.3f}  "
            f"{e['ppl_delta']:+8.2%}  kl {e['kl']:.4f}"
        )
    verdict = "passes" if report["passed"] else "FAILS"
    print(
        f"{args.tier} {verdict} its budget {report['budget_ppl_delta']:+.1%}: worst domain "
        f"{q['worst_domain']} {q['ppl_delta']:+.2%}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["passed"] else 1


def _cmd_flips(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    """Changed answers of built tiers against dense (collapse.flips), onto their cards."""
    from zerolayer.artifacts import read_card, write_card
    from zerolayer.collapse.build import eos_ids
    from zerolayer.collapse.flips import FlipEvaluator, draw_roc, heldout_prompts
    from zerolayer.collapse.verify import BUDGET_OF, artifact_model

    s = _settings(args, cfg)
    root = artifacts_dir(cfg, args.model)
    tiers = [t for t in args.tiers.split(",") if t]
    if unknown := sorted(set(tiers) - set(BUDGET_OF)):
        raise SystemExit(f"unknown tier kinds {unknown}; known: {', '.join(BUDGET_OF)}")
    built = [t for t in tiers if (root / t / "tier_card.json").exists()]
    if not built:
        raise SystemExit(f"no built artifact of {', '.join(tiers)} under {root}")
    model, tok, model_dir = _load(cfg, args.model)
    prompts = heldout_prompts(tok, _corpora(args, cfg).evaluation, s.flip_prompts, s.seed)
    flipper = FlipEvaluator(model, prompts, eos_ids(model, tok), s.flip_tokens, progress=True)
    figures: dict[str, Any] = {}
    for tier in built:
        card = read_card(root / tier)
        tier_model, cut = artifact_model(model_dir, root / tier, tier)
        f = flipper.evaluate(cut, tier_model, card.get("live_reference"), desc=f"{tier} flips")
        figures[tier] = f
        budget = s.flip_budget(BUDGET_OF[tier])
        conf = f["confidence"]
        print(
            f"{tier:9s} flips {f['flips']:6.1%} on {f['worst_domain']} (all domains "
            f"{f['overall']:.1%}), kl {f['kl']:.4f}, tokens agreeing "
            f"{f.get('agreement', 0.0):.1%}; confidence AUC "
            + ", ".join(f"{k} {v['auc']}" for k, v in conf["signals"].items())
        )
        if args.write_cards:
            card.pop("format_version", None)
            write_card(root / tier, {**card, "flips": f, "flip_budget": budget})
    png = draw_roc(figures, Path(args.out or root) / "flips_roc.png")
    print(f"ROC curves: {png}")
    if args.out:
        (Path(args.out) / "flips.json").write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def _cmd_price(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    """Each tier's throughput and cost per 1M tokens (collapse.price), into its cost file."""
    from zerolayer.artifacts import is_built
    from zerolayer.collapse.price import STREAMS, price_tiers

    model = args.model = args.model or cfg.default_model
    if model not in cfg.models:
        raise SystemExit(f"collapse: unknown model {model!r}")
    served = cfg.models[model].tiers
    tiers = [t for t in (args.tiers or ",".join(served)).split(",") if t]
    if unknown := [t for t in tiers if t not in served]:
        raise SystemExit(f"collapse: {model} has no tier {', '.join(unknown)}")
    ready = []
    for tier in tiers:
        folder = cfg.served_artifact_dir(model, tier)
        if folder is not None and not is_built(folder):
            print(f"price {model}:{tier}: its artifact is not built yet ({folder}); skipped")
        else:
            ready.append(tier)
    streams = [int(s) for s in args.streams.split(",")] if args.streams else list(STREAMS)
    price_tiers(cfg, model, ready, streams, args.tokens)
    return 0 if ready else 1


def _gate(args: argparse.Namespace, cfg: PlatformConfig, folder: Path) -> dict[str, Any]:
    """The promotion gate: the candidate scored on every domain's evaluation part, held-out
    traffic included whenever enough prompts are kept; its verdict against the kind's budget."""
    from zerolayer.collapse.corpus import domain_windows
    from zerolayer.collapse.traffic import MIN_PROMPTS, load_traffic
    from zerolayer.collapse.verify import BUDGET_OF, verify

    s = _settings(args, cfg)
    kept = len(load_traffic(cfg, args.model))
    args.from_traffic = kept >= MIN_PROMPTS
    print(
        f"gate: every domain{' and held-out traffic' if args.from_traffic else ''} "
        f"({kept} prompts kept{'' if args.from_traffic else f'; under {MIN_PROMPTS}, no traffic'})"
    )
    model, tok, model_dir = _load(cfg, args.model)
    windows = domain_windows(
        tok, _corpora(args, cfg).evaluation, s.eval_samples, s.seq_len, s.seed + 1
    )
    return verify(model, model_dir, folder, windows, s.budget(BUDGET_OF[args.tier]), args.tier)


def _cmd_promote(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.promote import promote
    from zerolayer.collapse.verify import BUDGET_OF

    if args.tier not in BUDGET_OF:
        raise SystemExit(f"unknown tier kind {args.tier!r}; known: {', '.join(BUDGET_OF)}")
    if args.model is None:
        args.model = cfg.default_model
    candidate = Path(args.candidate)
    report = _gate(args, cfg, candidate)
    for domain, e in report["quality"]["domains"].items():
        print(f"{domain:12s} {e['ppl_delta']:+8.2%}  kl {e['kl']:.4f}")
    try:
        entry = promote(artifacts_dir(cfg, args.model), args.tier, candidate, report)
    except ArtifactError as exc:
        print(f"zerolayer: {exc}", file=sys.stderr)
        return 1
    print(
        f"promoted {candidate} as {args.model}'s {args.tier} artifact (the previous one is "
        f"history/{entry['previous']}); a running platform swaps to it within seconds"
    )
    return 0


def _cmd_rollback(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.promote import rollback

    if args.model is None:
        args.model = cfg.default_model
    try:
        entry = rollback(artifacts_dir(cfg, args.model), args.tier)
    except ArtifactError as exc:
        print(f"zerolayer: {exc}", file=sys.stderr)
        return 1
    print(
        f"{args.model}'s {args.tier} artifact is {entry['restored']} again (the one it replaces "
        f"is history/{entry['rolled_back']}); a running platform swaps to it within seconds"
    )
    return 0


def _cmd_drift(args: argparse.Namespace, cfg: PlatformConfig) -> int:
    from zerolayer.collapse.calibrate import calibrate
    from zerolayer.collapse.corpus import token_windows
    from zerolayer.collapse.drift import compare, write_report
    from zerolayer.collapse.silence_map import SilenceMap

    s = _settings(args, cfg)
    folder = Path(args.map or artifacts_dir(cfg, args.model) / "silence_map")
    stored = SilenceMap.load(folder)
    if args.live:
        return _live_drift(args, cfg, stored, Path(args.out or folder.parent / "drift"))
    model, tok, _ = _load(cfg, args.model)
    if args.from_traffic:
        from zerolayer.collapse.traffic import live_corpus, load_traffic

        try:
            corpus = live_corpus(load_traffic(cfg, args.model), tok)
        except ValueError as exc:
            raise SystemExit(f"collapse: {exc}") from exc
    else:
        corpus = _corpus(args, "calibration", cfg)
    samples = args.samples or s.eval_samples
    windows = token_windows(tok, corpus, samples, s.seq_len, seed=s.seed)
    if not windows:
        raise SystemExit(
            f"collapse: the text holds fewer than {s.seq_len} tokens: not one window to measure"
        )
    new = calibrate(
        model,
        windows,
        quantile=stored.meta.get("quantile", s.quantile),
        meta={"model": args.model, "corpus": corpus.describe(), "seed": s.seed},
    )
    js, png = write_report(compare(stored, new), Path(args.out or folder.parent / "drift"))
    print(f"{js}\n{png}")
    return 0


def _live_drift(args: argparse.Namespace, cfg: PlatformConfig, stored: Any, out: Path) -> int:
    """`collapse drift --live`: one report per tier from its replicas' sampled activations."""
    from zerolayer.artifacts import card_stamp
    from zerolayer.artifacts.card import live_reference, served_card
    from zerolayer.collapse.drift import write_report
    from zerolayer.collapse.live_drift import compare_live, live_counts
    from zerolayer.store.embedded import platform_redis

    model = args.model or cfg.default_model
    tiers = args.tier or list(cfg.models[model].tiers)
    unknown = [t for t in tiers if t not in cfg.models[model].tiers]
    if unknown:
        raise SystemExit(f"collapse: {model} has no tier {', '.join(unknown)}")
    written = 0
    with platform_redis(cfg) as client:
        for tier in tiers:
            stamp = card_stamp(cfg.artifact_dir(model, tier))
            counts = live_counts(client, f"{model}:{tier}", stamp)
            if not any(counts["rows"]):
                print(f"{tier}: no live activation counts (a torch-engine tier counts them)")
                continue
            try:
                artifact = cfg.models[model].tiers[tier].artifact
                card = served_card(cfg.served_artifact_dir(model, tier), tier, artifact)
                reference = live_reference(card, cfg.artifact_root(model) / "silence_map")
            except Exception:  # no card readable: the report goes without the calibrated side
                reference = {}
            report = compare_live(stored, counts, reference)
            report["new"].update({"model": model, "tier": tier, "artifact": stamp})
            if not report["thresholds_match"]:
                print(
                    f"{tier}: warning: the replicas counted against thresholds other than "
                    "this map's"
                )
            js, png = write_report(report, out / f"live-{tier}")
            print(
                f"{tier}: {report['new']['layers_measured']} layers, "
                f"{max(counts['rows'])} tokens from {counts['replicas']} replica(s)\n{js}\n{png}"
            )
            written += 1
    if not written:
        raise SystemExit(
            "collapse: no tier has live activation counts yet (a running platform's torch-engine "
            "tiers write them while they serve; monitoring.sample_rate > 0)"
        )
    return 0


def add_parser(sub: Any, with_config: Any) -> None:
    """Register `collapse` and its subcommands; with_config(fn) passes the config to fn."""
    col = sub.add_parser("collapse", help="the collapse compiler").add_subparsers(
        dest="sub", required=True
    )

    def domains(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--domains",
            default=None,
            help="standard domains, comma-separated (default: the model's collapse.domains, all "
            "six unless models.yaml says otherwise: docs,code,chat,legal,zh,fr; '' none)",
        )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--model", default=None, help="model name from platform/models.yaml (its default)"
        )
        p.add_argument("--seq-len", type=int, default=None, help="tokens per sample")
        p.add_argument("--seed", type=int, default=None, help="seed of the window choice")
        domains(p)

    cal = col.add_parser("calibrate", help="measure activations into a silence map")
    common(cal)
    cal.add_argument("--samples", type=int, default=None, help="calibration samples")
    cal.add_argument(
        "--quantile", type=float, default=None, help="per-layer threshold quantile of |a|"
    )
    cal.add_argument(
        "--corpus", nargs="*", default=None, help="your own text files instead of the default"
    )
    cal.add_argument(
        "--out", default=None, help="output folder (default <cache>/artifacts/MODEL/silence_map)"
    )
    cal.set_defaults(func=with_config(_cmd_calibrate))

    mp = col.add_parser("map", help="draw a silence map: PNG heatmap and interactive HTML")
    mp.add_argument("--model", default=None, help="model name (default: the default model)")
    mp.add_argument("--map", default=None, help="silence map folder")
    mp.add_argument(
        "--quantile", type=float, default=None, help="threshold quantile (default: the map's)"
    )
    mp.add_argument("--out", default=None, help="output folder (default: the map's)")
    mp.set_defaults(func=with_config(_cmd_map))

    ab = col.add_parser("ablate", help="measure perplexity and KL of a cut against the dense model")
    common(ab)
    ab.add_argument("--map", default=None, help="silence map folder")
    ab.add_argument(
        "--method",
        choices=["static", "dynamic"],
        default="static",
        help="static: remove the lowest-scoring MLP channels; dynamic: per-token thresholds",
    )
    ab.add_argument(
        "--level",
        type=float,
        default=0.1,
        help="share of channels (static) or activations (dynamic)",
    )
    ab.add_argument(
        "--compensate", action="store_true", help="add removed channels' mean back as a bias"
    )
    ab.add_argument(
        "--sensitivity", action="store_true", help="also cut one layer at a time (static)"
    )
    ab.add_argument("--eval-samples", type=int, default=None, help="evaluation windows")
    ab.add_argument("--eval-corpus", nargs="*", default=None, help="your own held-out text files")
    ab.add_argument("--out", default=None, help="also write the JSON report here")
    ab.set_defaults(func=with_config(_cmd_ablate), corpus=None)

    bd = col.add_parser("build", help="build tier artifacts within their budgets, with tier cards")
    bd.add_argument("--model", default=None, help="model name (default: the default model)")
    bd.add_argument("--tiers", default="masked,pruned,dynamic,sparse24", help="comma-separated")
    bd.add_argument("--samples", type=int, default=None, help="calibration samples (models.yaml)")
    bd.add_argument("--eval-samples", type=int, default=None, help="evaluation samples")
    bd.add_argument("--seq-len", type=int, default=None, help="tokens per sample")
    domains(bd)
    bd.add_argument(
        "--corpus", nargs="*", default=None, help="your own text files: one more domain"
    )
    bd.add_argument(
        "--eval-corpus",
        nargs="*",
        default=None,
        help="your own held-out text files (the evaluation part of that domain)",
    )
    bd.add_argument(
        "--from-traffic",
        action="store_true",
        help="add the prompts kept from opted-in keys as one more domain (traffic) and build "
        "candidates (default out: <artifacts>/MODEL/candidates/<time>)",
    )
    bd.add_argument(
        "--traffic-prompts", type=int, default=256, help="most kept prompts used (a sample)"
    )
    bd.add_argument("--out", default=None, help="output folder (default <cache>/artifacts/MODEL)")
    bd.add_argument(
        "--no-price",
        dest="price",
        action="store_false",
        help="do not measure the built tiers' cost afterwards (collapse price)",
    )
    bd.set_defaults(func=with_config(_cmd_build))

    vf = col.add_parser(
        "verify", help="score a built artifact on every domain; exit 1 over its budget"
    )
    common(vf)
    vf.add_argument("tier", help="artifact kind: masked, pruned, dynamic or sparse24")
    vf.add_argument(
        "--artifact", default=None, help="artifact folder (default <artifacts>/MODEL/TIER)"
    )
    vf.add_argument("--eval-samples", type=int, default=None, help="windows per domain")
    vf.add_argument("--corpus", nargs="*", default=None, help="your own text: one more domain")
    vf.add_argument("--eval-corpus", nargs="*", default=None, help="your own held-out text")
    vf.add_argument(
        "--from-traffic",
        action="store_true",
        help="also score on the held-out part of the prompts kept from opted-in keys",
    )
    vf.add_argument(
        "--traffic-prompts", type=int, default=256, help="most kept prompts used (a sample)"
    )
    vf.add_argument("--out", default=None, help="also write the JSON report here")
    vf.set_defaults(func=with_config(_cmd_verify))

    fl = col.add_parser(
        "flips", help="count the answers built tiers change against dense, onto their cards"
    )
    common(fl)
    fl.add_argument("--tiers", default="masked,pruned,dynamic,sparse24", help="comma-separated")
    fl.add_argument("--flip-prompts", type=int, default=None, help="prompts per domain")
    fl.add_argument("--flip-tokens", type=int, default=None, help="answer tokens compared")
    fl.add_argument(
        "--no-write-cards",
        dest="write_cards",
        action="store_false",
        help="print and draw only (writing a served tier's card makes a running platform "
        "reload that tier)",
    )
    fl.add_argument("--out", default=None, help="folder for flips.json and flips_roc.png")
    fl.set_defaults(func=with_config(_cmd_flips), corpus=None)

    pc = col.add_parser("price", help="measure each tier's throughput and its cost per 1M tokens")
    pc.add_argument("--model", default=None, help="model name (default: the default model)")
    pc.add_argument("--tiers", default=None, help="served tiers, comma-separated (default all)")
    pc.add_argument(
        "--streams", default=None, help="concurrent streams measured (default 1,2,4,8,16,32)"
    )
    pc.add_argument("--tokens", type=int, default=64, help="tokens each stream generates")
    pc.set_defaults(func=with_config(_cmd_price))

    pr = col.add_parser(
        "promote",
        help="serve a candidate artifact, if it passes its budget on every domain and on "
        "held-out traffic; the running platform swaps to it without dropping requests",
    )
    common(pr)
    pr.add_argument("tier", help="artifact kind: masked, pruned, dynamic or sparse24")
    pr.add_argument("--candidate", required=True, help="the candidate's folder (`build` made it)")
    pr.add_argument("--eval-samples", type=int, default=None, help="windows per domain")
    pr.add_argument(
        "--traffic-prompts", type=int, default=256, help="most kept prompts used (a sample)"
    )
    pr.set_defaults(func=with_config(_cmd_promote), corpus=None, eval_corpus=None)
    rb = col.add_parser(
        "rollback", help="serve the artifact a kind had before its last promotion again"
    )
    rb.add_argument("tier", help="artifact kind: masked, pruned, dynamic or sparse24")
    rb.add_argument("--model", default=None, help="model name (default: the default model)")
    rb.set_defaults(func=with_config(_cmd_rollback))

    dr = col.add_parser("drift", help="calibrate on new text and compare with a stored map")
    common(dr)
    dr.add_argument("--map", default=None, help="stored silence map folder")
    dr.add_argument(
        "--samples", type=int, default=None, help="samples of the new text (eval_samples)"
    )
    dr.add_argument("--corpus", nargs="*", default=None, help="the new text (e.g. live prompts)")
    source = dr.add_mutually_exclusive_group()
    source.add_argument(
        "--live",
        action="store_true",
        help="the served tiers' live activations, as their replicas sampled them, channel by "
        "channel (one report per tier, from the platform's Redis)",
    )
    source.add_argument(
        "--from-traffic",
        action="store_true",
        help="the new text is the prompts kept from opted-in keys, as the tiers saw them (chat "
        "template applied), run through the dense model",
    )
    dr.add_argument(
        "--tier", nargs="*", default=None, help="with --live: these tiers (default: every one)"
    )
    dr.add_argument("--out", default=None, help="output folder (default <artifacts>/drift)")
    dr.set_defaults(func=with_config(_cmd_drift))
