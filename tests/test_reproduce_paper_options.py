"""``reproduce`` rows take options from the paper plan and the command line only, never from a config file."""

from __future__ import annotations

from halluscope.bench.reproduce import get_protocol, run_reproduce
from halluscope.bench.reproduce.running import paper_config
from halluscope.bench.reproduce.spec import ReproduceContext as Context
from halluscope.config import Config
from halluscope.methods import get_method
from tests.test_reproduce import _stories


def test_paper_config_drops_method_options_and_threshold_only():
    config = Config(cache=False, threshold=0.9, options={"rougeL": {"variant": "rouge1"}}, model="m")
    clean = paper_config(config)
    assert clean.options == {} and clean.threshold is None and clean.model == "m"
    assert config.options and config.threshold == 0.9  # the caller's config is left as it was


async def test_config_file_method_options_do_not_reach_a_paper_row(tmp_path, monkeypatch):
    import halluscope.methods

    path = _stories(tmp_path, 4)
    built: list[dict] = []

    def spy(name, **kwargs):
        method = get_method(name, **kwargs)
        built.append({**method.opts.model_dump(), "threshold": getattr(method, "threshold", None)})
        return method

    monkeypatch.setattr(halluscope.methods, "get_method", spy)

    async def rows(config: Config, out: str) -> list[dict]:
        ctx = Context(out_dir=tmp_path / out, config=config, dataset=str(path), progress=False)
        result = await run_reproduce(get_protocol("dove"), ctx, methods=["rougeL"], n_bootstrap=20, echo=lambda _: None)
        return [{k: r.get(k) for k in ("options", "metrics", "status")} for r in result["rows"]]

    plain = await rows(Config(cache=False), "plain")
    configured = await rows(Config(cache=False, threshold=0.99, options={"rouge": {"threshold": 0.01}}), "configured")
    assert configured == plain
    assert len(built) == 2 and built[0] == built[1]  # the method was built alike: no threshold from the file
