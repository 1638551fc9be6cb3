"""``halluscope bench``: score a dataset with a method (resumable) and write metrics, tables and plots."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from halluscope.cli.common import (
    NO_FLAGS,
    OLD_OUT_HELP,
    BootstrapOpt,
    JudgeApiKeyOpt,
    JudgeBaseUrlOpt,
    JudgeModelOpt,
    ModelFlags,
    OptionOpt,
    either,
    fail,
    finite_number,
    model_options,
    parse_options,
)

if TYPE_CHECKING:
    from halluscope.config import Config
    from halluscope.llm import LLM


@model_options()
def bench_command(
    dataset: Annotated[
        str,
        typer.Option(
            "--dataset",
            "-d",
            help=(
                "final[:dev], summedits[:domain], qags[:dev], squality[:dev], "
                "or a path to a .jsonl in the generic Example format."
            ),
        ),
    ],
    method: Annotated[str | None, typer.Option("--method", help="Method name (see `halluscope methods`).")] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help=(
                "Several methods on the same items, comma-separated, each optionally with options of its own: "
                "rouge,gate,geval,dcr+batch_size=4. One sub-folder per method (each resumes on its own), then the "
                "quality-and-cost table of all of them: quality.md, quality.json, rows.jsonl."
            ),
        ),
    ] = None,
    peers: Annotated[
        str | None,
        typer.Option(
            "--peers",
            help=(
                "With --methods: other libraries' faithfulness on the same items and endpoint: ragas,deepeval (the "
                "optional 'peers' dependency group; a peer not installed is skipped with the reason in the table)."
            ),
        ),
    ] = None,
    flags: ModelFlags = NO_FLAGS,
    judge_model: JudgeModelOpt = None,
    judge_base_url: JudgeBaseUrlOpt = None,
    judge_api_key: JudgeApiKeyOpt = None,
    option: OptionOpt = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="Only the first N items (after --sample). Raising it later resumes the same run."
        ),
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample",
            min=1,
            help=(
                "Seeded stratified subsample: N items per (split, domain), "
                "label mix kept; montage sets are sampled by group."
            ),
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --sample and the bootstrap.")] = 0,
    out: Annotated[
        Path | None, typer.Option("--output", "-O", help="Output folder (default runs/<dataset>-<method>-<model>/).")
    ] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help=OLD_OUT_HELP)] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Shared data folder (default ../shared/data).", envvar="HALLUSCOPE_DATA_DIR"),
    ] = None,
    select_on: Annotated[
        str | None,
        typer.Option(
            "--select-on",
            help=(
                "localize: the dev dataset on which FINAL's choices are made (prompt variant=auto, 2-step filter "
                "threshold), e.g. final:dev; default: the run's dev split, else its own items (in-sample)."
            ),
        ),
    ] = None,
    select_holdout: Annotated[
        float | None,
        typer.Option(
            "--select-holdout",
            help=(
                "localize: hold out this seeded share of the items (e.g. 0.3) for FINAL's "
                "choices and score only the rest (instead of choosing in-sample)."
            ),
        ),
    ] = None,
    bootstrap: BootstrapOpt = 1000,
    retry_unscored: Annotated[
        bool, typer.Option("--retry-unscored", help="On resume, run the items whose report was unscored again.")
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="Hide the progress bar.")] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help=(
                "Where items are scored: 'local' (this process) or 'ray' (an actor pool on a Ray "
                "cluster; needs the 'ray' extra). Same items.jsonl, resume and results either way."
            ),
            envvar="HALLUSCOPE_ENGINE",
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help=(
                "Ray cluster for --engine ray: 'auto' (the cluster on this machine, see `ray start --head`), "
                "'ray://head:10001' (Ray Client); default: RAY_ADDRESS, else a local Ray instance."
            ),
            envvar="RAY_ADDRESS",
        ),
    ] = None,
    actors: Annotated[
        int,
        typer.Option(
            "--actors", help="--engine ray: number of actors (each holds its own method and LLM client).", min=1
        ),
    ] = 2,
    actor_concurrency: Annotated[
        int | None,
        typer.Option(
            "--actor-concurrency",
            help="--engine ray: items/LLM requests in flight per actor (default: --concurrency split over the actors).",
            min=1,
        ),
    ] = None,
    actor_cpus: Annotated[
        float,
        typer.Option(
            "--actor-cpus",
            callback=finite_number,
            help="--engine ray: CPUs Ray reserves per actor (LLM-bound actors need little).",
            min=0.0,
            max=1024.0,
        ),
    ] = 1.0,
) -> None:
    """Benchmark a METHOD (or several: --methods) on a DATASET: per-item reports stream to items.jsonl (a re-run
    resumes), then results.json, results.md and PNG plots are written to the output folder; with --methods, each
    method in a sub-folder of its own and the quality-and-cost table of all of them beside."""
    out = either("--output", out, "--out", old_out)
    if (method is None) == (methods is None):
        raise fail("give --method NAME, or --methods NAME,NAME,... (not both)")
    if peers is not None and methods is None:
        raise fail("--peers goes with --methods (the peers are rows of the table beside the methods)")

    from halluscope.bench.datasets import DatasetError, load_dataset
    from halluscope.bench.runner import run_bench
    from halluscope.llm import LLMError
    from halluscope.methods import get_method

    if sample is not None and sample < 1:
        raise fail("--sample must be >= 1")
    if select_holdout is not None and not 0 < select_holdout < 1:
        raise fail("--select-holdout must be between 0 and 1")
    if engine not in ("local", "ray"):
        raise fail(f"--engine must be 'local' or 'ray', got {engine!r}")
    try:
        data = load_dataset(dataset, data_dir)
        selection = load_dataset(select_on, data_dir) if select_on else None
    except DatasetError as exc:
        raise fail(str(exc)) from exc
    config, concurrency = flags.config(), flags.concurrency
    if methods is not None:
        if select_on or select_holdout:
            raise fail("--select-on and --select-holdout go with --method (one calibrating method)")
        _bench_many(
            methods,
            peers,
            data,
            config,
            option,
            out,
            judge_flags=(judge_model, judge_base_url, judge_api_key),
            sample=sample,
            seed=seed,
            limit=limit,
            bootstrap=bootstrap,
            retry_unscored=retry_unscored,
            concurrency=concurrency,
            progress=not no_progress,
            engine=engine,
            address=address,
            actors=actors,
            actor_concurrency=actor_concurrency,
            actor_cpus=actor_cpus,
        )
        return
    assert method is not None
    try:
        m = get_method(method, config=config, **parse_options(option))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from exc
    if m.uses_llm:
        from halluscope.llm.cache import CacheBackendError

        try:
            _ = m.llm  # opens the response cache now: a wrong cache URL or an unreachable Redis fails here, clearly
        except CacheBackendError as exc:
            raise fail(str(exc)) from exc
        except (ValueError, LLMError):
            pass  # a backend that cannot be built is reported as before (judge / per item)
    judge = _judge(config, (judge_model, judge_base_url, judge_api_key), [m] if m.uses_llm else [], _needs_judge(data))
    results = _run_on_engine(
        (engine, address, actors, actor_concurrency, actor_cpus),
        lambda runner: run_bench(
            m,
            data,
            out,
            judge=judge,
            sample=sample,
            seed=seed,
            limit=limit,
            n_bootstrap=bootstrap,
            retry_unscored=retry_unscored,
            concurrency=concurrency,
            progress=not no_progress,
            engine=runner,
            select_on=selection,
            select_holdout=select_holdout,
        ),
    )
    _print_summary(results, out)
    if results["suite_errors"]:
        raise fail(f"metric suite(s) failed: {results['suite_errors']}", code=1)


T = TypeVar("T")


def _run_on_engine(engine_flags: tuple[Any, ...], run: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """The coroutine ``run(engine)`` run on the ``--engine`` the flags choose (None: the local one): a bench error
    exits 2 with its message, and the engine is closed afterwards."""
    import asyncio

    from halluscope.bench.runner import BenchError

    runner_engine, engine_errors = _engine(*engine_flags)
    try:
        return asyncio.run(run(runner_engine))
    except (BenchError, ValueError, *engine_errors) as exc:  # type: ignore[misc]  # a tuple of exception types
        raise fail(str(exc)) from exc
    finally:
        if runner_engine is not None:
            runner_engine.close()


def _engine(
    engine: str, address: str | None, actors: int, actor_concurrency: int | None, actor_cpus: float
) -> tuple[Any, tuple[type[Exception], ...]]:
    """The engine of ``--engine`` (None: the local one) and the errors it may raise while running."""
    if engine != "ray":
        return None, ()
    from halluscope.bench.ray_engine import RayEngine, RayEngineError

    try:
        runner_engine = RayEngine(
            address=address, actors=actors, actor_concurrency=actor_concurrency, cpus_per_actor=actor_cpus
        )
        runner_engine.connect()
    except (RayEngineError, ValueError, ConnectionError) as exc:
        raise fail(f"--engine ray: {exc}") from exc
    return runner_engine, (RayEngineError,)


def _needs_judge(data: Any) -> bool:
    """Whether a suite of this dataset asks a judge model: FINAL's matching of descriptions (gold descriptions)."""
    return any(e.descriptions is not None for e in data.examples)


def _judge(
    config: Config, judge_flags: tuple[str | None, ...], llm_methods: list[Any], needed: bool = True
) -> LLM | None:
    """The judge of suites that need one: ``--judge-model none``: none; the --judge-* model; else the (first LLM)
    method's model; else (methods with no model) the model the user configured (--model, --base-url,
    HALLUSCOPE_MODEL, the config file) when it can be built, never the embedded default unasked."""
    from halluscope.llm import LLMError, get_llm

    judge_model, judge_base_url, judge_api_key = judge_flags
    if judge_model is not None and judge_model.strip().lower() == "none":
        if needed:
            typer.secho("note: --judge-model none: FINAL's matching judge is skipped", err=True)
        return None
    if not needed and not any(judge_flags):
        return None
    try:
        if any(judge_flags):
            return get_llm(config.with_overrides(model=judge_model, base_url=judge_base_url, api_key=judge_api_key))
        if llm_methods:
            judge: LLM = llm_methods[0].llm
            return judge
        if config.model is None and config.base_url is None:
            typer.secho(
                "note: these methods use no model, so FINAL's matching judge is not loaded; it needs one: "
                "--judge-model NAME (e.g. embedded, or a model served at --judge-base-url) to match descriptions",
                err=True,
            )
            return None
        return _optional_judge(config)
    except (ValueError, LLMError) as exc:
        raise fail(f"judge model: {exc}") from exc


def _bench_many(
    methods: str,
    peers: str | None,
    data: Any,
    config: Config,
    option: list[str] | None,
    out: Path | None,
    *,
    judge_flags: tuple[str | None, ...],
    sample: int | None,
    seed: int,
    limit: int | None,
    bootstrap: int,
    retry_unscored: bool,
    concurrency: int | None,
    progress: bool,
    engine: str,
    address: str | None,
    actors: int,
    actor_concurrency: int | None,
    actor_cpus: float,
) -> None:
    """``--methods``: every method (and peer) on the same items, each in its own sub-folder, then the table."""

    from halluscope.bench.harness import QUALITY_MD, folder_name, parse_methods, run_systems
    from halluscope.bench.peers import PEER_NAMES, Endpoint, PeerUnavailable, make_peer
    from halluscope.methods import get_method

    try:
        specs = parse_methods(methods)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    if not specs and not peers:
        raise fail("--methods none runs the peers alone: name them with --peers")
    shared = parse_options(option)
    built = []
    for spec in specs:
        try:
            built.append(
                (
                    spec.label,
                    get_method(
                        spec.name,
                        config=config,
                        **{**shared, **parse_options([f"{k}={v}" for k, v in spec.options.items()])},
                    ),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise fail(f"{spec.label}: {str(exc).strip(chr(39) + chr(34))}") from exc
    llm_methods = [m for _, m in built if m.uses_llm]
    judge = _judge(config, judge_flags, llm_methods, _needs_judge(data))
    peer_list, skipped = [], {}
    endpoint = (
        Endpoint(config.base_url, config.model, config.api_key or "none", config.max_tokens)
        if config.base_url and config.model
        else None
    )
    for key in (k.strip() for k in (peers or "").split(",") if k.strip()):
        try:
            peer_list.append(make_peer(key, endpoint))
        except ValueError as exc:
            raise fail(f"--peers: {exc}") from exc
        except PeerUnavailable as exc:
            skipped[PEER_NAMES[key]] = str(exc)
            typer.secho(f"note: {PEER_NAMES[key]} skipped: {exc}", err=True)
    models = sorted({m.model_name for m in llm_methods if m.model_name})
    if out is None:
        from halluscope.bench.folder import default_out_dir

        out = default_out_dir(data.spec, "methods", models[0] if models else None, sample, seed)
    quality = _run_on_engine(
        (engine, address, actors, actor_concurrency, actor_cpus),
        lambda runner: run_systems(
            built,
            data,
            out,
            peers=peer_list,
            skipped=skipped,
            judge=judge,
            model=", ".join(models) or None,
            endpoint=config.base_url,
            sample=sample,
            seed=seed,
            limit=limit,
            n_bootstrap=bootstrap,
            retry_unscored=retry_unscored,
            concurrency=concurrency,
            progress=progress,
            engine=runner,
        ),
    )
    typer.echo((out / QUALITY_MD).read_text(encoding="utf-8"))
    folders = ", ".join(folder_name(label) for label in [*(label for label, _ in built), *(p.name for p in peer_list)])
    typer.echo(f"wrote {out}/quality.md, quality.json and rows.jsonl; one folder per system: {folders}")
    errors = {label: r["suite_errors"] for label, r in quality["results"].items() if r["suite_errors"]}
    if errors:
        raise fail(f"metric suite(s) failed: {errors}", code=1)


def _optional_judge(config: Config) -> LLM | None:
    """The configured model as a judge for suites that need one, when it can be built: a no-LLM method must
    run on a machine without any model (suites that need a judge then say so)."""
    from halluscope.llm import LLMError, get_llm

    try:
        return get_llm(config)
    except (ValueError, LLMError) as exc:
        typer.secho(f"note: no judge model available ({exc}); suites that need a judge are skipped", err=True)
        return None


def _print_summary(results: dict[str, Any], out: Path | None) -> None:
    from halluscope.bench.folder import default_out_dir

    folder = out or default_out_dir(
        results["dataset"], results["method"], results["model"], results["sample_per_stratum"], results["seed"]
    )
    u = results["usage"]
    typer.echo(
        f"{results['method']} on {results['dataset']}: {results['n']} items, {results['n_unscored']} unscored; "
        f"{u['calls']} LLM calls, {u['prompt_tokens'] + u['completion_tokens']} tokens"
        + (f" ({u['cached_prompt_tokens']} prompt tokens cached)" if u.get("cached_prompt_tokens") else "")
        + ", "
        f"{u['cache_hits']} cache hits; {results['wall_time_s']} s"
    )
    matching = results.get("metrics", {}).get("final_matching") or {}
    if "judge_time_s" in matching:
        ju = matching.get("judge_usage_this_run") or {}
        typer.echo(
            f"FINAL matching judge ({matching.get('judge_model')}): {matching['judge_items_this_run']} items matched "
            f"now, {ju.get('calls', 0)} LLM calls, {ju.get('cache_hits', 0)} replies from cache; "
            f"{matching['judge_time_s']} s"
        )
    for table in results["tables"]:
        typer.echo(f"\n{table['title']}\n{table['markdown']}")
    typer.echo(f"\nwrote {folder}/results.json, results.md and {len(results['plots'])} plot(s)")
