"""``halluscope serve``: the HTTP service (check/improve endpoints, web report)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from halluscope.cli.common import ApiKeyOpt, BaseUrlOpt, ModelOpt, fail, make_config


def serve_command(
    host: Annotated[str, typer.Option(help="Interface to bind; keep 127.0.0.1 unless a token is set.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8080,
    token: Annotated[Optional[str], typer.Option(help="Bearer token required on every request.", envvar="HALLUSCOPE_SERVER_TOKEN", show_default=False)] = None,
    method: Annotated[str, typer.Option(help="Default method for /check.")] = "geval",
    max_chars: Annotated[int, typer.Option(help="Max source+target characters per request.")] = 400_000,
    timeout: Annotated[float, typer.Option(help="Per-request time limit in seconds.")] = 300.0,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Serve POST /check and POST /improve (JSON, or ?format=html for the web report)."""
    try:
        import uvicorn

        from halluscope.server import ServerSettings, create_app
    except ImportError as exc:
        raise fail(f"the server needs its extra: pip install 'halluscope[server]' ({exc})")
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        raise fail("refusing to listen beyond loopback without --token / HALLUSCOPE_SERVER_TOKEN")
    config = make_config(model, base_url, api_key)
    settings = ServerSettings(token=token, max_chars=max_chars, timeout_s=timeout, default_method=method)
    uvicorn.run(create_app(config, settings), host=host, port=port, log_level="info")
