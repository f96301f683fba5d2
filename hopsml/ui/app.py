"""The Flask application of `hopsml ui`: read-only pages over one project root.

Every page is rendered on the server (Jinja templates, charts as SVG); the only script is
static/ui.js (sorting, filtering, polling RUNNING rows and growing logs). Responses carry a
Content-Security-Policy that allows no inline script, so a run name that looks like HTML stays text
even if something forgot to escape it; files from the root are sent only as downloads.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import mimetypes
import posixpath

from flask import Flask, Response, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from hopsml import config, layout
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.ui import charts, jobs, servings, views
from hopsml.ui import datasets as dataset_views
from hopsml.ui import featurestore as fs_views
from hopsml.ui.access import TokenCheck
from hopsml.ui.hosts import HostPolicy
from hopsml.ui.notebook import render_notebook

log = logging.getLogger(__name__)

# No inline script or style, no plugins or frames, no <base>, forms only to this view. CSP has no directive that
# forbids a <meta http-equiv=refresh> (navigate-to never shipped; `sandbox` blocks it only without allow-scripts,
# which ui.js needs), so that navigation is kept out by escaping: every value reaches a page through markupsafe's
# escape (Jinja's autoescape, and charts.py / notebook.py for the markup they build).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def create_app(settings: config.Settings, hosts: HostPolicy | None = None, access: TokenCheck | None = None) -> Flask:
    """The web view over `settings.root`; `settings.project` is the project the front page opens.

    It answers only requests whose Host header `hosts` allows (default: the loopback names), and with `access` only
    those that carry its token (access.py; `hopsml ui` always gives one: None is for a caller that serves the app
    in its own process, such as Flask's test client, or behind its own login)."""
    hosts = hosts or HostPolicy.loopback()
    app = Flask(__name__)
    app.config["HOPSML_SETTINGS"] = settings
    storage = Storage(settings.root)
    lost_after_s = settings.lost_after_s

    app.jinja_env.globals.update(fmt=charts.fmt, root_uri=storage.uri(), charts=charts,
                                  class_pairs=dataset_views.class_pairs, histogram_parts=dataset_views.histogram_parts,
                                  top_values=dataset_views.top_values, short_value=views.short_value)
    app.jinja_env.filters["shown"] = views.shown

    @app.before_request
    def _check_host() -> Response | None:
        host = request.headers.get("Host")
        if hosts.allows(host):
            return None
        log.warning("refused a request for host %r (not a name this view was started for)", host)
        return Response(f"hopsml ui does not answer for host {host!r}. If you reach it by this name, "
                        "start it with --allow-host NAME.\n", status=421, mimetype="text/plain")

    @app.before_request
    def _check_token() -> BaseResponse | None:   # a redirect is werkzeug's Response
        if access is None:
            return None
        allowed, in_query = access.check(request)
        if not allowed:
            return Response("hopsml ui needs the token it printed when it started: open the address it printed "
                            "(...?token=...), or send the header 'Authorization: Bearer TOKEN'.\n", status=403,
                            mimetype="text/plain")
        if in_query and request.method in ("GET", "HEAD"):   # the printed address: keep it as a cookie instead
            return access.set_cookie(redirect(access.without_token(request), code=303))
        return None

    @app.after_request
    def _headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.errorhandler(views.NotFound)
    def _not_found(exc: views.NotFound) -> tuple[str, int]:
        return render_template("error.html", title="not found", message=str(exc)), 404

    @app.errorhandler(404)
    def _no_route(exc: object) -> tuple[str, int]:
        return render_template("error.html", title="not found", message="no such page"), 404

    @app.errorhandler(HopsmlError)
    def _storage_error(exc: HopsmlError) -> tuple[str, int]:
        log.warning("page %s failed: %s", request.path, exc)
        return render_template("error.html", title="cannot read the root", message=str(exc)), 500

    @app.route("/")
    def index() -> str:
        return render_template("projects.html", projects=views.projects(storage), default=settings.project)

    @app.route("/p/<project>/")
    def experiments(project: str) -> str:
        views.check_project(storage, project)
        rows = views.experiment_rows(storage, project, lost_after_s)
        return render_template("experiments.html", project=project, rows=rows,
                               types=sorted({r["type"] for r in rows if r["type"]}),
                               states=sorted({r["state"] for r in rows}))

    @app.route("/p/<project>/experiments.json")
    def experiments_json(project: str) -> Response:
        views.check_project(storage, project)
        rows = views.experiment_rows(storage, project, lost_after_s)
        for row in rows:
            row["url"] = url_for("run", project=project, exp_id=row["id"])
        return jsonify(rows)

    @app.route("/p/<project>/runs/<exp_id>")
    def run(project: str, exp_id: str) -> str:
        views.check_project(storage, project)
        view = views.run_view(storage, project, exp_id, lost_after_s)
        program = view.get("program")
        if program and program["kind"] == ".ipynb":
            program["html"] = render_notebook(program["text"])
        return render_template("run.html", project=project, v=view)

    @app.route("/p/<project>/runs/<exp_id>/timeline")
    def timeline(project: str, exp_id: str) -> str:
        """The run's timeline: one lane per rank (drawn by static/timeline.js), stragglers, each rank's system
        metrics over time (charts) and their peaks."""
        views.check_project(storage, project)
        exp = views.experiment_dir(project, exp_id)
        rec = views.load_record(storage, project, exp_id)
        extra = {} if isinstance(rec, views.records.BrokenRecord) else rec.extra
        trace = exp.timeline_trace
        trace_url = (url_for("download", project=project, exp_id=exp_id, rel=posixpath.relpath(trace, exp.path))
                     if storage.exists(trace) else None)
        system = (extra.get("system") or {}).get("peaks") or {}
        keys = sorted({k for values in system.values() for k in values})
        return render_template("timeline.html", project=project, exp_id=exp_id, trace_url=trace_url,
                               stragglers=extra.get("stragglers") or {}, system=system, system_keys=keys,
                               system_charts=views.system_charts(storage, exp))

    @app.route("/p/<project>/runs/<exp_id>/tail/<path:rel>")
    def tail(project: str, exp_id: str, rel: str) -> Response:
        """A log from `offset` on, to follow a running experiment's output."""
        views.check_project(storage, project)
        exp = views.experiment_dir(project, exp_id)
        if not storage.isdir(exp.path):
            raise views.NotFound(f"no experiment {exp_id!r}")
        path = views.safe_join(exp.path, rel)
        offset = request.args.get("offset", type=int)
        text, end = views.read_tail(storage, path, offset)
        state = None
        rec = views.load_record(storage, project, exp_id)
        if not isinstance(rec, views.records.BrokenRecord):
            state = views.records.shown_state(storage, project, rec, lost_after_s)[0]
        return jsonify({"text": text, "offset": end, "state": state})

    @app.route("/p/<project>/runs/<exp_id>/files/<path:rel>")
    def download(project: str, exp_id: str, rel: str) -> Response:
        views.check_project(storage, project)
        exp = views.experiment_dir(project, exp_id)
        return _send(views.safe_join(exp.path, rel))

    @app.route("/p/<project>/compare")
    def compare(project: str) -> str:
        views.check_project(storage, project)
        ids = [i for i in request.args.getlist("id") if i]
        runs = [views.run_view(storage, project, i, lost_after_s) for i in dict.fromkeys(ids)]
        runs = [r for r in runs if r.get("rec") is not None]
        params = sorted({k for r in runs for k in r["rec"].hyperparameters})
        differs = {p: len({json.dumps(r["rec"].hyperparameters.get(p, "-"), sort_keys=True, default=str)
                           for r in runs}) > 1 for p in params}
        names = sorted({n for r in runs for n in r["metrics"]})
        overlaid = {name: {f"{r['rec'].name} ({r['id']})": r["metrics"].get(name, []) for r in runs}
                    for name in names}
        finals = {r["id"]: {n: (pts[-1][1] if pts else None) for n, pts in r["metrics"].items()} for r in runs}
        return render_template("compare.html", project=project, runs=runs, params=params, differs=differs, names=names,
                               overlaid=overlaid, finals=finals,
                               rows=views.experiment_rows(storage, project, lost_after_s))

    @app.route("/p/<project>/datasets/")
    def datasets(project: str) -> str:
        views.check_project(storage, project)
        return render_template("datasets.html", project=project, rows=dataset_views.dataset_rows(storage, project))

    @app.route("/p/<project>/datasets/<name>")
    def dataset(project: str, name: str) -> str:
        views.check_project(storage, project)
        return render_template("dataset.html", project=project, v=dataset_views.dataset_view(storage, project, name),
                               threshold=dataset_views.SKEW_THRESHOLD)

    @app.route("/p/<project>/featurestore/")
    def featurestore(project: str) -> str:
        views.check_project(storage, project)
        return render_template("featurestore.html", project=project, v=fs_views.overview(settings, project))

    @app.route("/p/<project>/featurestore/groups/<name>/<int:version>")
    def feature_group(project: str, name: str, version: int) -> str:
        views.check_project(storage, project)
        view = fs_views.group_view(settings, project, name, version, request.args.get("commit", type=int))
        return render_template("feature_group.html", project=project, v=view)

    @app.route("/p/<project>/featurestore/views/<name>/<int:version>")
    def feature_view(project: str, name: str, version: int) -> str:
        views.check_project(storage, project)
        return render_template("feature_view.html", project=project, v=fs_views.view_page(settings, project, name,
                                                                                           version))

    @app.route("/p/<project>/models/")
    def models(project: str) -> str:
        views.check_project(storage, project)
        rows = views.model_rows(storage, project)
        lineage = {f"{m['name']}:{m['version']}": m for m in fs_views.model_lineage(storage, project, rows)}
        return render_template("models.html", project=project, rows=rows, lineage=lineage,
                               servings=servings.servings_by_model(settings, project))

    @app.route("/p/<project>/servings/")
    def servings_list(project: str) -> str:
        views.check_project(storage, project)
        return render_template("servings.html", project=project, rows=servings.serving_rows(settings, project))

    @app.route("/p/<project>/servings/<name>")
    def serving(project: str, name: str) -> str:
        views.check_project(storage, project)
        view = servings.serving_view(settings, project, name)
        if view.get("broken"):
            return render_template("serving_broken.html", project=project, v=view)
        return render_template("serving.html", project=project, v=view)

    @app.route("/p/<project>/jobs/")
    def jobs_list(project: str) -> str:
        views.check_project(storage, project)
        return render_template("jobs.html", project=project, rows=jobs.job_rows(settings, project))

    @app.route("/p/<project>/jobs/<name>")
    def job(project: str, name: str) -> str:
        views.check_project(storage, project)
        return render_template("job.html", project=project, v=jobs.job_view(settings, project, name))

    @app.route("/p/<project>/jobs/<name>/executions/<int:execution_id>/<any(stdout, stderr):stream>")
    def job_log(project: str, name: str, execution_id: int, stream: str) -> Response:
        views.check_project(storage, project)
        return Response(jobs.log_text(settings, project, name, execution_id, stream), mimetype="text/plain")

    @app.route("/p/<project>/models/<name>/<int:version>/files/<path:rel>")
    def model_file(project: str, name: str, version: int, rel: str) -> Response:
        views.check_project(storage, project)
        try:
            mdir = layout.ModelDir.of(project, name, version)
        except HopsmlError as exc:
            raise views.NotFound(str(exc)) from None
        if not storage.exists(mdir.done):
            raise views.NotFound(f"no finished version {version} of model {name!r}")
        return _send(views.safe_join(mdir.path, rel))

    def _send(rel: str) -> Response:
        info = storage.info(views.check_inside(storage, rel))
        if not info.is_file:
            raise views.NotFound(f"no file {rel.rsplit('/', 1)[-1]!r} here")
        name = posixpath.basename(rel)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        safe_inline = kind.startswith("image/") and kind != "image/svg+xml" or kind == "text/plain"
        stream = storage.open_input(rel)

        def chunks():
            with stream:
                while block := stream.read(1 << 20):
                    yield block

        response = Response(chunks(), mimetype=kind if safe_inline else "application/octet-stream")
        response.headers["Content-Length"] = str(info.size)
        disposition = "inline" if safe_inline and request.args.get("view") else "attachment"
        response.headers["Content-Disposition"] = f"{disposition}; filename=\"{_ascii(name)}\""
        return response

    return app


def _ascii(name: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)


def settings_for(settings: config.Settings, project: str | None) -> config.Settings:
    """`settings` with another default project, checked as a name."""
    if not project:
        return settings
    layout.validate_name(project, "project name")
    return dataclasses.replace(settings, project=project)
