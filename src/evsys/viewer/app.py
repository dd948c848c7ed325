"""The viewer's HTTP application: a static single-page app plus a read-only JSON API over job directories.

```
GET /                                         the page (static/index.html; app.js and style.css beside it)
GET /api/jobs                                 every job (JobListing)
GET /api/jobs/{job}                           one job: config, metrics, every trial, trials without a result
GET /api/jobs/{job}/trials/{trial}            one trial: result, trajectory, traceback, verifier output, logs
GET /api/jobs/{job}/trials/{trial}/file?path= one log file's text (capped)
GET /api/diff?a={job}&b={job}                 per-task reward deltas between two jobs
```
Every response carries a Content-Security-Policy allowing only the viewer's own files (no inline script, no
remote anything), `nosniff`, and no caching of the API. Requests whose Host is not the loopback address the
viewer listens on are refused (a web page elsewhere cannot reach the API through DNS rebinding).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evsys.viewer.files import TEXT_CAP, UnsafePathError
from evsys.viewer.jobdata import (
    ChangeStamp,
    JobListing,
    LoadedJob,
    change_stamp,
    diff_jobs,
    job_listing,
    job_names,
    load_job,
    resolve_job,
)
from evsys.viewer.tokens import TokenDecoder, TokenizerFinder
from evsys.viewer.trialdata import load_trial, read_trial_file

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
ALLOWED_HOSTS = ("127.0.0.1", "localhost")


def _starlette() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise RuntimeError("the job viewer needs the 'viewer' extra: pip install 'evsys[viewer]'") from exc


class JobSource:
    """The jobs the viewer shows: every job under `jobs_dir`, or only the job named `only`. Token ids are
    decoded with `decoder` when given, else (with `find_tokenizers`) with each local model's own tokenizer."""

    def __init__(
        self,
        jobs_dir: Path,
        only: str | None = None,
        decoder: TokenDecoder | None = None,
        *,
        find_tokenizers: bool = False,
    ) -> None:
        self.jobs_dir = Path(jobs_dir)
        self.only = only
        self.tokenizers = TokenizerFinder(decoder, find_local=find_tokenizers)
        self._cache: dict[str, tuple[ChangeStamp, LoadedJob]] = {}

    def job_dir(self, name: str) -> Path:
        """The directory of a job the viewer may show; `UnsafePathError` for any other name."""
        if self.only is not None and name != self.only:
            raise UnsafePathError(f"no job named {name!r}")
        return resolve_job(self.jobs_dir, name)

    def load(self, name: str) -> LoadedJob:
        """The job `name`; a finished job is read again only when its directory or result.json changed,
        a running one (no finished_at yet) on every call, so a trial that just finished shows at once."""
        job_dir = self.job_dir(name)
        stamp = change_stamp(job_dir)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        job = load_job(job_dir)
        if not job.running:
            self._cache[name] = (stamp, job)
        return job

    def listings(self) -> list[JobListing]:
        """The job list, newest first (one job when the viewer was opened on a single job)."""
        names = [self.only] if self.only is not None else job_names(self.jobs_dir)
        listings = [job_listing(self.load(name)) for name in names]
        return sorted(listings, key=lambda j: (j.started_at or "", j.name), reverse=True)


def create_app(source: JobSource) -> ASGIApp:
    """The Starlette application serving `source`."""
    _starlette()
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Route
    from starlette.staticfiles import StaticFiles

    static_dir = Path(str(resources.files("evsys.viewer") / "static"))

    def api(handler: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                body = handler(request)
            except (UnsafePathError, FileNotFoundError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            return JSONResponse(body, headers={"Cache-Control": "no-store"})

        return endpoint

    def jobs(request: Request) -> dict[str, Any]:
        return {"jobs": [j.model_dump(mode="json") for j in source.listings()], "single": source.only}

    def job(request: Request) -> dict[str, Any]:
        loaded = source.load(request.path_params["job"])
        body = loaded.model_dump(mode="json")
        body["running"] = loaded.running
        body["n_errors"] = loaded.n_errors
        body["state"] = loaded.state
        return body

    def trial(request: Request) -> dict[str, Any]:
        job_dir = source.job_dir(request.path_params["job"])
        loaded = load_trial(job_dir, request.path_params["trial"])
        decoder = source.tokenizers.decoder_for(loaded.result.model if loaded.result else None)
        if decoder is not None:
            loaded.token_texts = decoder.completion_texts(loaded.trajectory)
        return loaded.model_dump(mode="json")

    def trial_file(request: Request) -> dict[str, Any]:
        job_dir = source.job_dir(request.path_params["job"])
        rel_path = request.query_params.get("path", "")
        text = read_trial_file(job_dir, request.path_params["trial"], rel_path, TEXT_CAP)
        return {"text": text.text, "size": text.size, "truncated": text.truncated}

    def diff(request: Request) -> dict[str, Any]:
        a = source.load(request.query_params.get("a", ""))
        b = source.load(request.query_params.get("b", ""))
        return {"a": a.name, "b": b.name, "rows": [r.model_dump(mode="json") for r in diff_jobs(a, b)]}

    def index(request: Request) -> Response:
        return FileResponse(static_dir / "index.html", media_type="text/html; charset=utf-8")

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/jobs", api(jobs)),
            Route("/api/jobs/{job}", api(job)),
            Route("/api/jobs/{job}/trials/{trial}", api(trial)),
            Route("/api/jobs/{job}/trials/{trial}/file", api(trial_file)),
            Route("/api/diff", api(diff)),
        ]
    )
    app.mount("/static", StaticFiles(directory=static_dir, follow_symlink=False), name="static")
    return _guarded(app)


def _guarded(app: ASGIApp) -> ASGIApp:
    """Wrap `app`: refuse foreign Host headers and non-GET methods, add the security headers."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1").rsplit(":", 1)[0].strip("[]")
        if host not in ALLOWED_HOSTS or scope["method"] not in ("GET", "HEAD"):
            return await _refuse(send, 403 if host not in ALLOWED_HOSTS else 405)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        return await app(scope, receive, send_with_headers)

    return guarded


async def _refuse(send: Send, status: int) -> None:
    body = b"refused\n"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
